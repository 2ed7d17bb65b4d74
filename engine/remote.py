"""SERVICE to other endpoints: an HTTP POST of the part's query (``application/sparql-query``), answered with SPARQL
JSON results, through the allowlist (``--service-allow``), with the chain of SERVICE calls counted (``HOPS_HEADER``).

engine imports no HTTP library: the protocol layer passes a ``requests.Session`` in (``HttpSession``: what of it
the evaluator uses)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from pyoxigraph import QueryBoolean, QueryResultsFormat, parse_query_results

from engine.errors import ServiceFailed, ServiceLoop, ServiceNotAllowed
from engine.results import Row, rows_of
from store.errors import NestedTooDeep
from store.limits import check_nesting

#: The header an HTTP SERVICE call carries: how many SERVICE calls led to it. A request that arrives with it (this
#: server called through a chain of SERVICE calls, possibly itself under another name) passes it on plus one.
HOPS_HEADER = "Concentrator-Service-Hops"
#: The longest chain of HTTP SERVICE calls a query may start or continue (a deeper one is refused, 508).
MAX_SERVICE_HOPS = 4
#: Redirects an HTTP SERVICE call follows, each hop checked against the allowlist.
MAX_SERVICE_REDIRECTS = 5
#: The SERVICE hops that led to the request being evaluated (set by the protocol from ``HOPS_HEADER``).
service_hops: ContextVar[int] = ContextVar("service_hops", default=0)
_REDIRECTS = (301, 302, 303, 307, 308)


class HttpResponse(Protocol):
    status_code: int
    content: bytes
    text: str
    headers: Any


class HttpSession(Protocol):
    """What the evaluator needs of ``requests.Session``."""

    def post(self, url: str, *, data: bytes, timeout: float, headers: dict[str, str],
             allow_redirects: bool = True) -> HttpResponse: ...


def host_allowed(url: str, allow_hosts: frozenset[str] | None) -> bool:
    """Whether an http(s) URL's host (or host:port) is on an allowlist (None: any host). The server reaches other
    machines only where its operator allows it (``--service-allow``): SERVICE calls, and LDES sources."""
    if allow_hosts is None:
        return True
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    hostport = f"{host}:{parts.port}" if parts.port else host
    return parts.scheme in ("http", "https") and (host in allow_hosts or hostport in allow_hosts)


def check_reachable(iri: str, allow_hosts: frozenset[str] | None) -> None:
    """Refuse a SERVICE IRI whose host is not on the allowlist (a rule or query must not probe other machines
    through this server)."""
    if not host_allowed(iri, allow_hosts):
        assert allow_hosts is not None
        parts = urlsplit(iri)
        host = (parts.hostname or "").lower()
        hostport = f"{host}:{parts.port}" if parts.port else host
        raise ServiceNotAllowed(f"SERVICE <{iri}>: {hostport or iri} is not on this server's SERVICE allowlist "
                                f"({', '.join(sorted(allow_hosts)) or 'empty: only this server'}); "
                                "the operator adds hosts with --service-allow")


def remote_rows(http: HttpSession, iri: str, query: str, allow_hosts: frozenset[str] | None,
                timeout: float) -> list[Row]:
    """The solutions another endpoint gives for ``query`` (a boolean answer: one empty solution or none)."""
    content = _post(http, iri, query.encode("utf-8"), allow_hosts, timeout)
    try:
        check_nesting(content, QueryResultsFormat.JSON.media_type)  # never too deep for the parser
        results = parse_query_results(content, QueryResultsFormat.JSON)
    except (SyntaxError, ValueError):
        raise ServiceFailed(f"SERVICE <{iri}> did not answer with SPARQL JSON results") from None
    except NestedTooDeep as error:
        raise ServiceFailed(f"SERVICE <{iri}> answered SPARQL JSON results with {error.message}") from None
    if isinstance(results, QueryBoolean):
        return [{}] if bool(results) else []
    return rows_of(results)


def _post(http: HttpSession, iri: str, body: bytes, allow_hosts: frozenset[str] | None, timeout: float) -> bytes:
    """POST a query to another endpoint: every redirect hop checked against the allowlist (re-posting the query),
    one more SERVICE hop announced, and only the status of a failure reported (a remote body is never passed on
    to the client: it may be an internal page)."""
    hops = service_hops.get() + 1
    if hops > MAX_SERVICE_HOPS:
        raise ServiceLoop(f"SERVICE <{iri}> would be the {hops}th SERVICE call of a chain (this request arrived "
                          f"through {hops - 1}); the limit is {MAX_SERVICE_HOPS}: a query that calls this server "
                          "back loops")
    url = iri
    for _ in range(MAX_SERVICE_REDIRECTS + 1):
        check_reachable(url, allow_hosts)
        response = http.post(url, data=body, timeout=timeout, allow_redirects=False, headers={
            "Content-Type": "application/sparql-query; charset=utf-8",
            "Accept": "application/sparql-results+json", HOPS_HEADER: str(hops)})
        location = response.headers.get("Location") if response.status_code in _REDIRECTS else None
        if location is None:
            break
        url = urljoin(url, location)
    else:
        raise ServiceFailed(f"SERVICE <{iri}> redirected more than {MAX_SERVICE_REDIRECTS} times")
    if response.status_code != 200:
        moved = f" (redirected to <{url}>)" if url != iri else ""
        raise ServiceFailed(f"SERVICE <{iri}>{moved} answered HTTP {response.status_code}")
    return response.content
