"""Run real SPARQL engines (Apache Jena ARQ 4.5, Comunica 5.4) as clients, as subprocesses.

Install both with ``bash .ci/install-clients``: Jena from Debian's ``libapache-jena-java`` (jars
only, run through ``conformance/tools/jena-classpath.sh``), Comunica
(``@comunica/query-sparql@5.4``) with npm into ``$CONCENTRATOR_CLIENTS_DIR`` (default
``~/.cache/concentrator-clients``).

``run_jena(query)`` / ``run_comunica(query)`` evaluate a SELECT query (typically with
``SERVICE <http://127.0.0.1:PORT/…>`` clauses) and return its solutions as
``[{var: term in N-Triples syntax}]`` (``<http://x>``, ``"5"^^<…#integer>``, ``"a"``,
``"a"@en``, every blank node as ``_:``; ``xsd:string`` literals without datatype; unbound
variables left out), so that results of different engines compare equal (order aside).

What each engine sends for ``SERVICE <http://127.0.0.1:PORT/streams/s?WINDOWS=HEAD/-PT05M> { ?s ?p ?o }``
(logged by the endpoint of tests/test_clients.py; the same with ``?WINDOWS=2016-06-20T10:00:00+02:00/PT05M``):

Jena ARQ 4.5 (one request)::

    GET /streams/s?WINDOWS=HEAD/-PT05M&query=SELECT%20%20%2A%0AWHERE%0A%20%20%7B%20?s%20%20?p%20%20?o%20%7D%0A
    Accept: application/sparql-results+json, application/sparql-results+xml;q=0.9,
            text/tab-separated-values;q=0.7, text/csv;q=0.5,application/json;q=0.2,application/xml;q=0.2,*/*;q=0.1
    Connection: Upgrade, HTTP2-Settings / Upgrade: h2c / HTTP2-Settings: …   (answer HTTP/1.1, ignore)
    Content-Length: 0, User-Agent: Java-http-client/17.0.15, no body

  The IRI's query string is kept verbatim and ``&query=`` appended; the ``+`` of ``+02:00`` arrives
  raw (``?WINDOWS=2016-06-20T10:00:00+02:00/PT05M&query=…``), so a form decoder turns it into a
  space. ``?`` inside the query text is not percent-encoded. Once the URL would exceed 2,048
  characters Jena POSTs to the IRI unchanged (query string kept) with
  ``Content-Type: application/sparql-query;charset=utf-8`` and the query as body.

Comunica 5.4 (three requests)::

    GET /streams/s?WINDOWS=HEAD/-PT05M                      (identification, no body)
    Accept: application/n-quads,application/trig;q=0.95,application/ld+json;q=0.9,
            application/n-triples;q=0.8,text/turtle;q=0.6,application/rdf+xml;q=0.5,… ,text/shaclc-ext;q=0.05
    GET /streams/s?WINDOWS=HEAD/-PT05M?query=SELECT%20(%20COUNT(%20*%20)%20AS%20%3Fcount%20)%20WHERE%20
        %7B%20SELECT%20%3Fo%20%3Fp%20%3Fs%20WHERE%20%7B%20%3Fs%20%3Fp%20%3Fo%20.%20%7D%20%7D   (one line)
    GET /streams/s?WINDOWS=HEAD/-PT05M?query=SELECT%20%3Fo%20%3Fp%20%3Fs%20WHERE%20%7B%20SELECT%20%3Fo
        %20%3Fp%20%3Fs%20WHERE%20%7B%20%3Fs%20%3Fp%20%3Fo%20.%20%7D%20%7D                     (one line)
    Accept: application/sparql-results+json;q=1.0,application/sparql-results+xml;q=0.7
    (all three) user-agent: Comunica/5.0 (linux; x64) ActorHttpFetch/5.4.0 Node.js/20,
    Accept-Encoding: br,gzip,deflate, accept-language: *, sec-fetch-mode: cors, connection: keep-alive

  The cardinality COUNT query comes first, then the query itself. ``?query=`` is appended with
  ``?`` even though the IRI already has a query string (so ``WINDOWS`` parses as
  ``HEAD/-PT05M?query=…``); the query is encodeURIComponent-encoded, the ``+`` of the IRI arrives
  raw. When ``<sd:endpoint>?query=…`` reaches 600 characters Comunica instead POSTs to the
  sd:endpoint IRI unchanged with ``Content-Type: application/x-www-form-urlencoded`` and body
  ``query=SELECT+%3Fo+…`` (form encoding: spaces as ``+``).

What Comunica 5.4 needs to treat the IRI as a SPARQL endpoint (``actor-rdf-metadata-extract-sparql-service``
and ``actor-query-source-identify-hypermedia-sparql``, checked against a logging endpoint):

- The identification GET must succeed (2xx) with an RDF body it can parse (we answer
  ``text/turtle``). A 404 or other error makes the whole query fail
  ("Could not retrieve … (HTTP status 404)") and no SPARQL request is ever sent.
- The RDF must contain a triple ``?x sd:endpoint <E>`` (``sd:`` =
  ``http://www.w3.org/ns/sparql-service-description#``) whose subject is a blank node, or the
  requested IRI itself, or the ``sd:defaultDataset`` object. ``rdf:type sd:Service`` is not
  needed; a triple with another IRI as subject is ignored. So the minimal answer is
  ``[] sd:endpoint <http://127.0.0.1:PORT/streams/s?WINDOWS=HEAD/-PT05M> .`` (the request IRI,
  query string included). ``E`` may also be a literal, resolved against the request IRI
  (``[] sd:endpoint "" .`` works too).
- Comunica then sends its queries to ``E`` + ``?query=…``, not to the requested IRI: if ``E`` is
  the IRI without its query string (``/streams/s``), the ``WINDOWS`` parameter is silently
  dropped. ``E`` must therefore be the full request IRI.
- Without an ``sd:endpoint`` description the response is taken as an RDF document, and the
  SERVICE pattern is matched against its triples (no error). The two other ways Comunica
  accepts an endpoint are an IRI ending in ``/sparql`` or ``/sparql/``, or a ``Server`` response
  header matching ``Virtuoso`` or ``Fuseki`` (with a 2xx answer to the GET).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ClientFailed",
    "comunica_available",
    "jena_available",
    "run_comunica",
    "run_jena",
    "skip_reason_comunica",
    "skip_reason_jena",
    "solutions_from_json",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
# $CONCENTRATOR_SHARED_TOOLS: another folder holding jena-classpath.sh (the name predates the in-repository copy)
TOOLS_DIR = Path(os.environ.get("CONCENTRATOR_SHARED_TOOLS") or REPO_ROOT / "conformance" / "tools")
JENA_CLASSPATH_SCRIPT = TOOLS_DIR / "jena-classpath.sh"
JENA_ARQ_JAR = Path("/usr/share/java/jena-arq.jar")
CLIENTS_DIR = Path(os.environ.get("CONCENTRATOR_CLIENTS_DIR") or Path.home() / ".cache" / "concentrator-clients")
COMUNICA_BIN = CLIENTS_DIR / "node_modules" / ".bin" / "comunica-sparql"

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
RDF_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
RDF_DIR_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#dirLangString"

Solution = dict[str, str]

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class ClientFailed(RuntimeError):
    """The engine exited with an error, timed out or printed no SPARQL JSON results."""

    def __init__(self, engine: str, message: str, stderr: str = "") -> None:
        self.engine = engine
        self.stderr = stderr
        text = f"{engine}: {message}"
        if stderr.strip():
            text += f"\n--- {engine} stderr ---\n{stderr.strip()}"
        super().__init__(text)


# --- availability --------------------------------------------------------------------------------

INSTALL_HINT = "run `bash .ci/install-clients`"


def skip_reason_jena() -> str | None:
    """Why Jena ARQ cannot be run here (a message for ``pytest.skip``), or None if it can."""
    if not JENA_ARQ_JAR.is_file():
        return f"Jena ARQ not installed: {INSTALL_HINT} (apt-get install libapache-jena-java)"
    if shutil.which("java") is None:
        return "Jena ARQ: no `java` on PATH (install a JRE, e.g. apt-get install default-jre-headless)"
    if not JENA_CLASSPATH_SCRIPT.is_file():
        return f"Jena ARQ: {JENA_CLASSPATH_SCRIPT} not found (it is part of the repository: is the clone complete?)"
    return None


def skip_reason_comunica() -> str | None:
    """Why Comunica cannot be run here (a message for ``pytest.skip``), or None if it can."""
    if not os.access(COMUNICA_BIN, os.X_OK):
        return f"Comunica not installed in {CLIENTS_DIR}: {INSTALL_HINT} (npm install @comunica/query-sparql@5.4)"
    if shutil.which("node") is None:
        return "Comunica: no `node` on PATH (Node.js 20 is needed)"
    return None


def jena_available() -> bool:
    return skip_reason_jena() is None


def comunica_available() -> bool:
    return skip_reason_comunica() is None


@functools.cache
def _jena_classpath() -> str:
    try:
        done = subprocess.run(
            ["sh", str(JENA_CLASSPATH_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClientFailed("jena", f"{JENA_CLASSPATH_SCRIPT} failed: {exc}") from exc
    if done.returncode != 0 or not done.stdout.strip():
        raise ClientFailed("jena", f"{JENA_CLASSPATH_SCRIPT} exited with {done.returncode}", done.stderr)
    return done.stdout.strip()


# --- running -------------------------------------------------------------------------------------


def run_jena(query: str, timeout: float = 60) -> list[Solution]:
    """Evaluate a SELECT query with Jena ARQ (``arq.sparql --results=json``)."""
    reason = skip_reason_jena()
    if reason is not None:
        raise ClientFailed("jena", reason)
    cmd = ["java", "-cp", _jena_classpath(), "arq.sparql", "--results=json", "--query"]
    return _run("jena", cmd, query, timeout)


def run_comunica(query: str, timeout: float = 60, variable_targets: bool = False) -> list[Solution]:
    """Evaluate a SELECT query with Comunica (``comunica-sparql -t application/sparql-results+json``).

    ``variable_targets`` adds ``--serviceAllowVariableTargets`` (needed for ``SERVICE ?var``).
    """
    reason = skip_reason_comunica()
    if reason is not None:
        raise ClientFailed("comunica", reason)
    cmd = [str(COMUNICA_BIN), "-t", "application/sparql-results+json"]
    if variable_targets:
        cmd.append("--serviceAllowVariableTargets")
    cmd.append("-f")
    return _run("comunica", cmd, query, timeout)


def _run(engine: str, cmd: Sequence[str], query: str, timeout: float) -> list[Solution]:
    """Run ``cmd + [query file]`` and parse its SPARQL JSON results from stdout."""
    with tempfile.TemporaryDirectory(prefix=f"{engine}-query-") as tmp:
        path = Path(tmp) / "query.rq"
        path.write_text(query, encoding="utf-8")
        env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
        try:
            done = subprocess.run(
                [*cmd, str(path)], capture_output=True, timeout=timeout, check=False, cwd=tmp, env=env
            )
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
            raise ClientFailed(engine, f"timed out after {timeout:g} s", stderr) from exc
        except OSError as exc:
            raise ClientFailed(engine, f"cannot start {cmd[0]}: {exc}") from exc
    stdout = done.stdout.decode("utf-8", "replace")
    stderr = _ANSI_ESCAPE.sub("", done.stderr.decode("utf-8", "replace"))  # Comunica colours its log
    if done.returncode != 0:
        raise ClientFailed(engine, f"exited with status {done.returncode}", stderr or stdout)
    try:
        document = json.loads(stdout)
        return solutions_from_json(document)
    except (ValueError, KeyError, TypeError) as exc:
        raise ClientFailed(engine, f"no SPARQL JSON results on stdout ({exc}): {stdout[:500]!r}", stderr) from exc


# --- SPARQL JSON results → N-Triples terms -------------------------------------------------------


def solutions_from_json(document: Mapping[str, Any]) -> list[Solution]:
    """The solutions of a SPARQL 1.1 JSON results document, each term in N-Triples syntax."""
    bindings = document["results"]["bindings"]
    return [{var: term_to_ntriples(term) for var, term in binding.items()} for binding in bindings]


def term_to_ntriples(term: Mapping[str, Any]) -> str:
    """One RDF term of SPARQL JSON results in N-Triples syntax (blank nodes as ``_:``)."""
    kind = term["type"]
    if kind == "uri":
        return f"<{term['value']}>"
    if kind == "bnode":
        return "_:"
    if kind in ("literal", "typed-literal"):
        lexical = '"' + _escape(term["value"]) + '"'
        lang = term.get("xml:lang") or term.get("lang")
        if lang:
            direction = term.get("its:dir") or term.get("direction")
            return f"{lexical}@{lang}--{direction}" if direction else f"{lexical}@{lang}"
        datatype = term.get("datatype")
        if datatype and datatype not in (XSD_STRING, RDF_LANG_STRING, RDF_DIR_LANG_STRING):
            return f"{lexical}^^<{datatype}>"
        return lexical
    if kind == "triple":
        value = term["value"]
        parts = (term_to_ntriples(value[key]) for key in ("subject", "predicate", "object"))
        return "<<( " + " ".join(parts) + " )>>"
    raise ValueError(f"unknown SPARQL JSON term type {kind!r}")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
