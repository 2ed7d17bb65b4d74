"""Reading stream requests' parameters, including what real SPARQL engines send for ``SERVICE``.

Pure functions of the query string and headers (no Flask request object), so each client's form
is tested alone. What each engine sends (observed, see conformance/clients.py):

- pyoxigraph: ``POST /streams/s?WINDOWS=…`` with an ``application/sparql-query`` body.
- Jena ARQ 4.5: ``GET /streams/s?WINDOWS=…&query=…``; a ``+`` of a timezone offset arrives raw and
  a form decoder makes it a space (``sparql_ext.revision`` reads the space back as ``+``).
- Comunica 5.4: appends ``?query=`` to an IRI that already has a query string
  (``/streams/s?WINDOWS=HEAD/-PT05M?query=SELECT…``): a ``?`` cannot occur in a WindowRef, so
  whatever follows a ``?`` inside the WINDOWS value is read as more parameters. Before querying,
  it GETs the IRI to identify it and treats it as a SPARQL endpoint only if the RDF it gets back
  says ``[] sd:endpoint <IRI>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote_plus

import isodate

from protocol.errors import BadRequest


@dataclass(frozen=True)
class WindowedParams:
    """The windowed-IRI parameters of a request."""

    windows: str | None  # the WindowRef text, None for the stream itself
    extra: dict[str, list[str]] = field(default_factory=dict)  # parameters found inside WINDOWS


def windowed_params(query_string: str) -> WindowedParams:
    """The WINDOWS parameter of a raw (undecoded) query string, split where a client appended
    ``?query=…`` to it. Working on the raw string decodes the appended parameters exactly once
    (a query's ``%26`` stays an ``&`` inside the query, its ``%2B`` a ``+``).

    >>> windowed_params("WINDOWS=HEAD/-PT05M?query=SELECT%20*%20%7B%20FILTER(1%2B1%3D2%20%26%26%20true)%20%7D")
    WindowedParams(windows='HEAD/-PT05M', extra={'query': ['SELECT * { FILTER(1+1=2 && true) }']})
    >>> windowed_params("WINDOWS=2016-06-20T10:00:00+02:00/PT05M&query=ASK%7B%7D").windows
    '2016-06-20T10:00:00 02:00/PT05M'
    >>> windowed_params("query=ASK%7B%7D")
    WindowedParams(windows=None, extra={})
    """
    values = [value for key, _, value in (part.partition("=") for part in query_string.split("&"))
              if unquote_plus(key) == "WINDOWS"]
    if not values:
        return WindowedParams(None)
    if len(values) > 1:
        raise BadRequest(f"WINDOWS is given {len(values)} times; a windowed IRI names one WindowRef")
    raw_ref, _, rest = values[0].partition("?")
    ref = unquote_plus(raw_ref).strip()  # like any form decoder: a raw '+' becomes a space
    extra: dict[str, list[str]] = {}
    for key, value in parse_qsl(rest, keep_blank_values=True):
        extra.setdefault(key, []).append(value)
    if not ref:
        raise BadRequest("WINDOWS is empty: give a WindowRef such as HEAD/-PT05M or R/HEAD/PT05M/PT01M")
    return WindowedParams(ref, extra)


def is_service_identification(user_agent: str | None, has_query: bool) -> bool:
    """Comunica's identification GET (no query): it needs a service description, not the data."""
    return not has_query and bool(user_agent) and user_agent.startswith("Comunica/")  # type: ignore[union-attr]


def duration_micros(text: str, parameter: str) -> int:
    """An xsd:duration of fixed length (no years or months) in µs."""
    try:
        value = isodate.parse_duration(text)
    except (isodate.ISO8601Error, ValueError):
        raise BadRequest(f"{parameter}={text!r} is not an xsd:duration such as PT30S or PT5M") from None
    if isinstance(value, isodate.Duration):
        raise BadRequest(f"{parameter}={text!r}: years and months are not fixed lengths; use days or less")
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros < 0:
        raise BadRequest(f"{parameter}={text!r} is negative")
    return micros


def timeout_seconds(text: str | None, default: float, limit: float = 3600.0) -> float:
    """The ``timeout`` parameter: seconds to wait for a window to complete."""
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"timeout={text!r} is not a number of seconds") from None
    if not 0 <= value <= limit:
        raise BadRequest(f"timeout={text!r} must be between 0 and {limit:g} seconds")
    return value
