"""Registered continuous queries: RSP-QL and C-SPARQL registrations (``sparql_ext.rspql``) compiled onto what
exists (docs/rsp-ql.md).

- Each window becomes a window sequence of its stream (its WindowRef from ``rspql.window_ref``: the epoch's grid,
  or ``t0=``), registered when the query is and held while it exists.
- A ``CONSTRUCT`` whose output names a stream of this server (``BASE/streams/NAME``, a stream alias, or C-SPARQL's
  ``REGISTER STREAM name``) becomes the rule ``query.NAME`` (rules/registry.py: its outputs appended to that
  stream exactly once, cycles refused with 409). Any other registration is a **continuous query**: its results
  are a continuous response that follows its first window's sequence (``protocol/queries.py``).
- Registrations persist in ``<data>/queries/registry.jsonl`` (one ``put`` or ``delete`` record a line, one
  durable append per batch, a torn last line dropped at start-up), so they survive restarts with the same
  sequences and windows.

A batch is all or none: every registration is read, resolved against the streams and checked by pyoxigraph before
anything changes; then the rules of the batch are registered in one batch (which may refuse it, 400/409), and only
then the continuous queries' sequences and the journal's one write.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urljoin

from engine.syntax import checked_query
from rules.errors import RuleError, RuleNotFound, RuleRejected
from rules.registry import RuleRegistry, RuleSpec
from sparql_ext.errors import ConcentratorError, ReportSyntaxError
from sparql_ext.lexer import Kind, tokenize
from sparql_ext.reporting import parse_report
from sparql_ext.revision import parse_instant
from sparql_ext.rspql import (
    CSPARQL,
    Registration,
    RegistrationError,
    Resolved,
    WindowDecl,
    compile_registration,
    parse_registration,
    window_ref,
)
from sparql_ext.windowing import resolve, to_micros
from sparql_ext.windowref import parse_window_ref
from store.durable import append_durably, now_micros, write_bytes
from store.errors import StoreError
from store.streams import StreamCatalog, check_stream_name

log = logging.getLogger(__name__)

JOURNAL = "registry.jsonl"
RULE_PREFIX = "query."  # the rule a CONSTRUCT registration becomes is named query.NAME
DEFAULT_REPORT = "window-close,non-empty-content"  # seed 004: C-SPARQL's window close and non-empty content


class QueryNotFound(RuleError):
    status_hint = 404


@dataclass(frozen=True)
class QuerySpec:
    """What ``PUT /queries/NAME`` (or one entry of ``PUT /queries``) gives."""

    name: str
    text: str
    base: str  # this server's base URL
    report: str | None = None
    operator: str | None = None
    t0: str | None = None  # an xsd:dateTime: the first window starts there (default: the epoch's grid)


@dataclass(frozen=True)
class QueryWindow:
    window: str | None  # its name in the text (None: C-SPARQL's default-graph window)
    stream: str
    ref: str  # canonical repeating WindowRef
    sequence: str


@dataclass(frozen=True)
class RegisteredQuery:
    name: str
    text: str
    language: str
    form: str
    base: str
    windows: list[QueryWindow]
    compiled: str  # the extended SPARQL evaluated (the project's WindowRef form)
    report: str
    operator: str
    output: str | None = None  # the output stream (a rule's) or the IRI the text names
    rule: str | None = None  # the rule it is (a CONSTRUCT into a stream of this server)
    t0: str | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RegisteredQuery:  # type: ignore[type-arg]
        return cls(**{**data, "windows": [QueryWindow(**w) for w in data["windows"]]})


@dataclass
class _Prepared:
    spec: QuerySpec
    query: RegisteredQuery
    rule: RuleSpec | None = None
    needed: list[tuple[str, str]] = field(default_factory=list)  # (stream, ref) sequences to register


class QueryRegistry:
    """Registered queries by name, persisted in ``<data>/queries/registry.jsonl``."""

    def __init__(self, directory: Path, rules: RuleRegistry) -> None:
        self.rules = rules
        self.catalog: StreamCatalog = rules.catalog
        self._lock = threading.RLock()
        self._queries: dict[str, RegisteredQuery] = {}
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / JOURNAL
        self._records = 0
        self._load()

    def queries(self) -> list[RegisteredQuery]:
        with self._lock:
            return [self._queries[name] for name in sorted(self._queries)]

    def find(self, name: str) -> RegisteredQuery | None:
        return self._queries.get(name)

    def get(self, name: str) -> RegisteredQuery:
        query = self._queries.get(name)
        if query is None:
            raise QueryNotFound(f"no query named {name!r}: register it with PUT /queries/{name}", rule=name)
        return query

    def put(self, spec: QuerySpec) -> tuple[RegisteredQuery, bool]:
        return self.put_many([spec])[0]

    def put_many(self, specs: Sequence[QuerySpec]) -> list[tuple[RegisteredQuery, bool]]:
        """Register (or replace) every query of ``specs``, all or none; raises (400, 409) before any change."""
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                raise RuleRejected(f"query {spec.name!r} is in the batch twice", rule=spec.name)
            seen.add(spec.name)
        with self._lock:
            prepared = [self._prepare(spec) for spec in specs]
            rules = [p.rule for p in prepared if p.rule is not None]
            if rules:
                self.rules.put_many(rules)  # the batch's rules, all or none (400, 409)
            sequences = self._register([p for p in prepared if p.rule is None])
            made: list[tuple[RegisteredQuery, bool]] = []
            for item in prepared:
                query = item.query
                if item.rule is None:
                    windows = [QueryWindow(w.window, w.stream, w.ref, sequences[(w.stream, w.ref)])
                               for w in query.windows]
                    query = RegisteredQuery(**{**vars(query), "windows": windows})
                made.append((query, query.name not in self._queries))
            self._append([{"op": "put", "query": query.to_json()} for query, _ in made])
            for query, _ in made:
                old = self._queries.get(query.name)
                self._queries[query.name] = query
                self._hold(query, old)
                if old is not None and old.rule is not None and old.rule != query.rule:
                    self._delete_rule(old.rule)
            self._compact_if_grown()
        return made

    def delete(self, name: str) -> None:
        with self._lock:
            query = self.get(name)
            self._append([{"op": "delete", "name": name}])
            del self._queries[name]
            self._hold(None, query)
            if query.rule is not None:
                self._delete_rule(query.rule)

    # -- preparing a registration (nothing changes) ----------------------------------------------------------------

    def _prepare(self, spec: QuerySpec) -> _Prepared:
        try:
            try:
                check_stream_name(spec.name)
            except StoreError:
                raise RuleRejected(f"{spec.name!r} is not a query name: use 1-120 letters, digits, '.', '_' or "
                                   "'-'") from None
            registration = parse_registration(spec.text)
            _check_sparql(registration, spec.base)
            t0 = None if spec.t0 is None else to_micros(parse_instant(spec.t0, f"t0={spec.t0!r}").at)
            resolved, windows = self._windows(registration, spec.base, t0)
            compiled = compile_registration(registration, resolved)
            checked_query(compiled, spec.base)
            report, operator = self._policy(spec, registration)
            output = self._output(registration, spec.base)
        except ConcentratorError as error:
            raise RuleRejected(f"query {spec.name!r}: {error.message}", rule=spec.name,
                               status_hint=error.status_hint) from error
        rule_name = RULE_PREFIX + spec.name if registration.form == "CONSTRUCT" and output is not None else None
        query = RegisteredQuery(spec.name, spec.text, registration.language, registration.form, spec.base.rstrip("/"),
                                windows, compiled, report, operator, output or registration.output, rule_name,
                                spec.t0)
        if rule_name is not None:
            assert output is not None
            rule = RuleSpec(rule_name, compiled, output, spec.base, report, operator)
            return _Prepared(spec, query, rule)
        return _Prepared(spec, query, None, [(w.stream, w.ref) for w in windows])

    def _windows(self, registration: Registration, base: str, t0: int | None
                 ) -> tuple[dict[str | None, Resolved], list[QueryWindow]]:
        if not registration.windows:
            raise RegistrationError("the query declares no window (FROM NAMED WINDOW <w> ON <stream> [RANGE …], or "
                                    "C-SPARQL's FROM STREAM <stream> [RANGE …])")
        resolved: dict[str | None, Resolved] = {}
        windows: list[QueryWindow] = []
        for decl in registration.windows:
            stream_name = self._stream_of(decl, base)
            stream = self.catalog.get(stream_name)
            at = stream.accepted_time
            ref = str(parse_window_ref(window_ref(decl, at if at is not None else now_micros(), t0)))
            resolved[decl.name] = Resolved(f"{base.rstrip('/')}/streams/{stream_name}?WINDOWS={ref}",
                                           stream.config.timestamp_predicate)
            windows.append(QueryWindow(decl.name, stream_name, ref, ""))
        return resolved, windows

    def _stream_of(self, decl: WindowDecl, base: str) -> str:
        iri = urljoin(base.rstrip("/") + "/", decl.stream)
        prefix = base.rstrip("/") + "/streams/"
        alias = self.catalog.by_alias(decl.stream)
        name = iri[len(prefix):] if iri.startswith(prefix) else alias.config.name if alias is not None else None
        if name is None or self.catalog.find(name) is None:
            what = f"window <{decl.name}>" if decl.name is not None else "FROM STREAM"
            raise RegistrationError(f"{what} reads stream <{decl.stream}>, which is not a stream of this server: "
                                    f"create it (PUT /streams/NAME, with alias={decl.stream} to keep this IRI)")
        return name

    def _output(self, registration: Registration, base: str) -> str | None:
        """The stream of this server the registration's output names, or None."""
        if registration.output is None:
            return None
        if registration.language == CSPARQL:  # REGISTER STREAM name: a stream of this server, by name
            return check_stream_name(registration.output)
        iri = urljoin(base.rstrip("/") + "/", registration.output)
        prefix = base.rstrip("/") + "/streams/"
        if iri.startswith(prefix) and "/" not in iri[len(prefix):]:
            return check_stream_name(iri[len(prefix):])
        stream = self.catalog.by_alias(registration.output)
        return stream.config.name if stream is not None else None

    @staticmethod
    def _policy(spec: QuerySpec, registration: Registration) -> tuple[str, str]:
        if spec.operator is not None and registration.operator is not None and \
                spec.operator.lower() != registration.operator:
            raise RegistrationError(f"operator={spec.operator} contradicts the text's {registration.operator.upper()}")
        operator = spec.operator or registration.operator or "rstream"
        report = spec.report or DEFAULT_REPORT
        try:
            parsed = parse_report(report, operator)
        except ReportSyntaxError as error:
            raise RegistrationError(error.message) from None
        return ",".join(sorted(p.value for p in parsed.policies)), parsed.operator.value

    # -- changing things -------------------------------------------------------------------------------------------

    def _register(self, items: list[_Prepared]) -> dict[tuple[str, str], str]:
        needed: dict[str, dict[str, None]] = {}
        for item in items:
            for stream_name, ref in item.needed:
                needed.setdefault(stream_name, {})[ref] = None
        found: dict[tuple[str, str], str] = {}
        for stream_name, refs in needed.items():
            stream = self.catalog.get(stream_name)
            kept = {ref: self._kept_sequence(stream_name, ref) for ref in refs}
            fresh = [ref for ref, ident in kept.items() if ident is None]
            made = stream.register_many([(ref, resolve(parse_window_ref(ref), stream)) for ref in fresh])
            for ref, sequence in zip(fresh, made, strict=True):
                kept[ref] = sequence.id
            found.update({(stream_name, ref): ident for ref, ident in kept.items() if ident is not None})
        return found

    def _kept_sequence(self, stream: str, ref: str) -> str | None:
        """The sequence a registered query already reads for (stream, ref): a count window's ``HEAD`` resolves
        anew at each registration, so a replaced query keeps its windows."""
        for query in self._queries.values():
            for window in query.windows:
                if (window.stream, window.ref) == (stream, ref) and window.sequence:
                    found = self.catalog.find(stream)
                    if found is not None and found.windows.sequence(window.sequence) is not None:
                        return window.sequence
        return None

    def _hold(self, query: RegisteredQuery | None, released: RegisteredQuery | None) -> None:
        for window in query.windows if query is not None else []:
            if window.sequence and (stream := self.catalog.find(window.stream)) is not None:
                stream.windows.hold(window.sequence)
        for window in released.windows if released is not None else []:
            if window.sequence and (stream := self.catalog.find(window.stream)) is not None:
                stream.windows.release(window.sequence)

    def _delete_rule(self, name: str) -> None:
        try:
            self.rules.delete(name)
        except RuleNotFound:
            pass  # deleted over /rules already

    # -- the journal ------------------------------------------------------------------------------------------------

    def _load(self) -> None:
        if not self.path.exists():
            return
        lines = self.path.read_bytes().split(b"\n")
        damaged = lines[-1] != b""
        for number, line in enumerate(lines[:-1], 1):
            try:
                record = json.loads(line)
                if record["op"] == "put":
                    query = RegisteredQuery.from_json(record["query"])
                    self._queries[query.name] = query
                else:
                    self._queries.pop(record["name"], None)
            except (ValueError, KeyError, TypeError) as error:
                log.warning("%s line %d is unreadable, left out: %s", self.path, number, error)
                damaged = True
        self._records = len(lines) - 1
        for query in self._queries.values():
            self._hold(query, None)
        if damaged:
            self._rewrite()

    def _append(self, records: list[dict[str, object]]) -> None:
        append_durably(self.path, b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records))
        self._records += len(records)

    def _compact_if_grown(self) -> None:
        if self._records > 2 * len(self._queries) + 1_000:
            self._rewrite()

    def _rewrite(self) -> None:
        write_bytes(self.path, b"".join(json.dumps({"op": "put", "query": q.to_json()}, separators=(",", ":"))
                                        .encode() + b"\n" for q in self._queries.values()))
        self._records = len(self._queries)


def _check_sparql(registration: Registration, base: str) -> None:
    """pyoxigraph's check of the user's SPARQL, at the user's lines and columns: the text with its registration
    clauses blanked (same length), ``WINDOW`` read as ``GRAPH`` and each ``timestamp( … )`` as a variable."""
    chars = list(registration.text)
    for start, end in registration.cuts:
        chars[start:end] = [c if c in "\r\n" else " " for c in registration.text[start:end]]
    tokens = list(tokenize(registration.text))
    for keyword, _, _ in registration.blocks:
        tok = tokens[keyword]
        chars[tok.start:tok.end] = list("GRAPH ")
    for start, end in registration.timestamps:
        a, b = tokens[start].start, tokens[end].end
        chars[a:b] = list("?_" + "t" * (b - a - 2))  # a variable as long as the call
    text = "".join(chars)
    if any(t.kind is Kind.WORD and t.text.upper() == "WINDOW" for t in tokenize(text)):
        raise RegistrationError("WINDOW must be followed by a window's <IRI> or a variable and a group { … }")
    checked_query(text, base)
