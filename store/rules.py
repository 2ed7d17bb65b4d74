"""Rules (DESIGN §1, issue 4): CONSTRUCT queries with an output stream, fired per completed window.

Persisted under ``<data>/rules/NAME.rq`` (the text) and ``NAME.json`` (output stream, base IRI, inputs, status).
The registry analyses a rule's windowed inputs statically with ``parse_extended``:

- ``SERVICE <this server's /streams/NAME?WINDOWS=R…>`` (or an alias IRI of a stream with ``?WINDOWS=R…``);
- ``WINDOWS R… { … }`` inside ``SERVICE <this server's /streams/NAME>`` (or an alias IRI).

A rule whose windowed inputs cannot be determined statically (``SERVICE ?var``, or no repeating windowed input
at all) is refused with 400 (first cut). Each input's sequence is registered on its stream at registration
(as ``select_window`` does for repeating refs). A rule whose output stream is one of its inputs, directly or
through other rules' outputs, is refused with 409.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from sparql_ext import ExtendedQuery, parse_extended
from sparql_ext.errors import SparqlExtError
from sparql_ext.windowed import windowed_params
from sparql_ext.windowing import resolve
from sparql_ext.windowref import parse_window_ref
from store.errors import StoreError
from store.stream import StreamConfig, write_json
from store.streams import StreamCatalog, check_stream_name


class RuleRejected(StoreError):
    """A rule that cannot be registered as written."""

    status_hint = 400


class RuleCycle(StoreError):
    """A rule whose output would feed back into its own inputs."""

    status_hint = 409


class RuleNotFound(StoreError):
    status_hint = 404


@dataclass(frozen=True)
class RuleInput:
    stream: str
    ref: str  # canonical repeating WindowRef
    sequence: str  # sequence id on the stream


@dataclass
class RuleStatus:
    firings: int = 0
    outputs: int = 0  # elements appended to the output stream
    failures: int = 0
    last_latency_ms: float | None = None
    last_error: str | None = None
    last_window: str | None = None
    log: list[str] = field(default_factory=list)  # the latest errors, newest last


@dataclass
class Rule:
    name: str
    text: str
    output: str  # stream name
    base: str  # this server's base URL when registered (resolves local stream IRIs)
    inputs: list[RuleInput]
    status: RuleStatus = field(default_factory=RuleStatus)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "output": self.output, "base": self.base,
                "inputs": [asdict(i) for i in self.inputs], "status": asdict(self.status)}

    @classmethod
    def from_json(cls, text: str, data: dict) -> Rule:  # type: ignore[type-arg]
        return cls(data["name"], text, data["output"], data["base"], [RuleInput(**i) for i in data["inputs"]],
                   RuleStatus(**data.get("status", {})))


LOG_KEEP = 20


def output_stream_name(output: str, base: str) -> str:
    """A stream name, or this server's stream URL (``BASE/streams/NAME``), as a stream name."""
    prefix = base.rstrip("/") + "/streams/"
    name = output[len(prefix):] if output.startswith(prefix) else output
    try:
        return check_stream_name(name)
    except StoreError:
        raise RuleRejected(f"output={output!r} is neither a stream name nor a stream URL of this server "
                           f"({prefix}NAME)") from None


def analyse_inputs(text: str, base: str, catalog: StreamCatalog) -> list[tuple[str, str]]:
    """The (stream name, canonical repeating WindowRef) pairs a rule reads; refuses what cannot be known."""
    try:
        extended = parse_extended(text, base)
        if extended.template is None and "CONSTRUCT" not in extended.sparql.upper():
            raise RuleRejected("a rule must be a CONSTRUCT query")
        found: dict[tuple[str, str], None] = {}
        _walk(extended, None, base.rstrip("/"), catalog, found)
    except SparqlExtError as error:
        raise RuleRejected(f"rule is not valid extended SPARQL: {error}") from None
    if not found:
        raise RuleRejected(
            "the rule reads no repeating windowed IRI of this server (SERVICE <BASE/streams/NAME?WINDOWS=R…>, "
            "or WINDOWS R… inside SERVICE <BASE/streams/NAME>): it would never fire")
    return list(found)


def _walk(query: ExtendedQuery, stream: str | None, base: str, catalog: StreamCatalog,
          found: dict[tuple[str, str], None]) -> None:
    for part in query.parts:
        inner_stream: str | None = None
        if part.target_is_variable and part.kind in ("service", "windows"):
            raise RuleRejected(
                f"{part.kind.upper()} {part.target}: a rule's windowed inputs must be constant IRIs (first cut: "
                "inputs known only at run time are not supported)")
        if part.kind == "service":
            named, query_string = _local_stream(part.target, base, catalog)
            if named is not None:
                windows = windowed_params(query_string).windows
                if windows is None:
                    inner_stream = named
                else:
                    ref = parse_window_ref(windows)
                    if ref.repeating:
                        found[(named, str(ref))] = None
        elif part.kind == "windows" and stream is not None:
            ref = parse_window_ref(part.target)
            if ref.repeating:
                found[(stream, str(ref))] = None
        if isinstance(part.inner, ExtendedQuery):
            _walk(part.inner, inner_stream, base, catalog, found)


def _local_stream(iri: str, base: str, catalog: StreamCatalog) -> tuple[str | None, str]:
    if base and iri.startswith(f"{base}/streams/"):
        parts = urlsplit(iri)
        return parts.path.rsplit("/", 1)[-1], parts.query
    address, _, query_string = iri.partition("?")
    stream = catalog.by_alias(address)
    return (stream.config.name, query_string) if stream is not None else (None, "")


def rule_file(text: str) -> tuple[str, str | None]:
    """A ``.rq`` file's text and the output its first line declares (``# output: <IRI-or-name>``)."""
    first, _, _ = text.partition("\n")
    first = first.strip()
    if first.startswith("#") and first[1:].strip().lower().startswith("output:"):
        value = first[1:].strip()[len("output:"):].strip()
        return text, value.strip("<>") or None
    return text, None


class RuleRegistry:
    """Rules by name, persisted under ``<data>/rules``."""

    def __init__(self, directory: Path, catalog: StreamCatalog) -> None:
        self.directory = directory
        self.catalog = catalog
        self._lock = threading.RLock()
        self._rules: dict[str, Rule] = {}
        directory.mkdir(parents=True, exist_ok=True)
        for meta in sorted(directory.glob("*.json")):
            query = meta.with_suffix(".rq")
            if query.exists():
                rule = Rule.from_json(query.read_text(encoding="utf-8"), json.loads(meta.read_text()))
                self._rules[rule.name] = rule

    def names(self) -> list[str]:
        return sorted(self._rules)

    def rules(self) -> list[Rule]:
        with self._lock:
            return [self._rules[name] for name in sorted(self._rules)]

    def get(self, name: str) -> Rule:
        rule = self._rules.get(name)
        if rule is None:
            raise RuleNotFound(f"no rule named {name!r}: create it with PUT /rules/{name}")
        return rule

    def put(self, name: str, text: str, output: str, base: str) -> tuple[Rule, bool]:
        """Register (or replace) a rule; creates the output stream if missing. Returns the rule and whether
        it is new. Raises RuleRejected (400) or RuleCycle (409) before anything is changed."""
        try:
            check_stream_name(name)
        except StoreError:
            raise RuleRejected(f"{name!r} is not a rule name: use 1-128 letters, digits, '.', '_' or '-'") from None
        output_name = output_stream_name(output, base)
        pairs = analyse_inputs(text, base, self.catalog)
        with self._lock:
            inputs_by_stream = {stream for stream, _ in pairs}
            if self._reaches(output_name, inputs_by_stream, exclude=name):
                raise RuleCycle(f"rule {name!r}: its output stream {output_name!r} feeds its own inputs "
                                f"({', '.join(sorted(inputs_by_stream))}), directly or through other rules")
            inputs = []
            for stream_name, ref_text in pairs:
                stream = self.catalog.get(stream_name)
                ref = parse_window_ref(ref_text)
                sequence = stream.windows.find(ref_text) or stream.register(ref_text, resolve(ref, stream))
                inputs.append(RuleInput(stream_name, ref_text, sequence.id))
            if self.catalog.find(output_name) is None:
                self.catalog.put(StreamConfig(output_name))
            old = self._rules.get(name)
            rule = Rule(name, text, output_name, base.rstrip("/"), inputs, old.status if old else RuleStatus())
            (self.directory / f"{name}.rq").write_text(text, encoding="utf-8")
            self._rules[name] = rule
            self.save(rule)
            return rule, old is None

    def delete(self, name: str) -> None:
        with self._lock:
            self.get(name)
            del self._rules[name]
            (self.directory / f"{name}.json").unlink(missing_ok=True)
            (self.directory / f"{name}.rq").unlink(missing_ok=True)

    def save(self, rule: Rule) -> None:
        with self._lock:
            if self._rules.get(rule.name) is rule:
                write_json(self.directory / f"{rule.name}.json", rule.to_json())

    def reading(self, stream: str, sequence: str) -> list[Rule]:
        """The rules fired by a window of ``sequence`` on ``stream``."""
        with self._lock:
            return [rule for rule in self._rules.values()
                    if any(i.stream == stream and i.sequence == sequence for i in rule.inputs)]

    def load_directory(self, directory: Path, base: str) -> list[str]:
        """Register every ``NAME.rq`` of a rules directory (start-up); returns the errors, one per bad file."""
        errors = []
        for path in sorted(directory.glob("*.rq")):
            text, output = rule_file(path.read_text(encoding="utf-8"))
            try:
                if output is None:
                    raise RuleRejected("no '# output: <IRI-or-stream-name>' first line")
                self.put(path.stem, text, output, base)
            except StoreError as error:
                errors.append(f"{path}: {error}")
        return errors

    def _reaches(self, start: str, targets: set[str], exclude: str) -> bool:
        """Whether stream ``start`` is, or feeds through the rules (except ``exclude``), one of ``targets``."""
        seen: set[str] = set()
        frontier = [start]
        while frontier:
            stream = frontier.pop()
            if stream in targets:
                return True
            if stream in seen:
                continue
            seen.add(stream)
            for rule in self._rules.values():
                if rule.name != exclude and any(i.stream == stream for i in rule.inputs):
                    frontier.append(rule.output)
        return False
