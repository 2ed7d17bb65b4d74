"""What registration learns from a rule's text, before anything changes: its output stream, its constant
windowed inputs, the prefix queries that discover its ``SERVICE ?var`` inputs (rules/registry.py's docstring says
what each is), the streams an event rule's EVENTs read, and what a rule file's leading comments declare."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyoxigraph import NamedNode

from engine.evaluation import ExtendedEvaluator
from engine.syntax import checked_query
from rules.errors import RuleRejected
from rules.event_spec import event_rule_spec
from sparql_ext import ExtendedQuery, parse_extended
from sparql_ext.errors import SparqlExtError
from sparql_ext.windowed import windowed_params
from sparql_ext.windowref import parse_window_ref
from store.errors import StoreError
from store.streams import check_stream_name


def output_stream_name(output: str, base: str) -> str:
    """A stream name, or this server's stream URL (``BASE/streams/NAME``), as a stream name."""
    prefix = base.rstrip("/") + "/streams/"
    name = output[len(prefix):] if output.startswith(prefix) else output
    try:
        return check_stream_name(name)
    except StoreError:
        raise RuleRejected(f"output={output!r} is neither a stream name nor a stream URL of this server "
                           f"({prefix}NAME)") from None


@dataclass(frozen=True)
class RuleAnalysis:
    """What registration learns from a rule's text."""

    constant: list[tuple[str, str]]  # (stream name, canonical repeating WindowRef)
    discovered_by: list[tuple[str, str]]  # (prefix query binding the variable, '?var') of top-level SERVICE ?var
    events: list[str] = field(default_factory=list)  # streams an event rule's EVENTs read (rules/event_rules.py)


def analyse_rule(text: str, base: str, evaluator: ExtendedEvaluator) -> RuleAnalysis:
    """A rule's constant windowed inputs and the prefix queries that discover the others; refuses what cannot be
    a rule."""
    spec = event_rule_spec(text, base, evaluator)
    if spec is not None:  # MATCH: fired on each element of the streams its EVENTs read, not on windows
        return RuleAnalysis([], [], sorted(set(spec.streams.values())))
    try:
        extended = checked_query(text, base)  # pyoxigraph's syntax check too (and firings find it cached)
        if extended.template is None and "CONSTRUCT" not in extended.sparql.upper():
            raise RuleRejected("a rule must be a CONSTRUCT query")
        constant: dict[tuple[str, str], None] = {}
        discovered_by: list[tuple[str, str]] = []
        _walk(extended, None, evaluator, constant, discovered_by, top=True)
    except SparqlExtError as error:
        raise RuleRejected(f"rule is not valid extended SPARQL: {error}") from None
    if not constant and not discovered_by:
        raise RuleRejected(
            "the rule reads no repeating windowed IRI of this server (SERVICE <BASE/streams/NAME?WINDOWS=R…>, "
            "WINDOWS R… inside SERVICE <BASE/streams/NAME>, or SERVICE ?var with ?var bound from the dataset): "
            "it would never fire")
    return RuleAnalysis(list(constant), discovered_by)


def _walk(query: ExtendedQuery, stream: str | None, evaluator: ExtendedEvaluator,
          constant: dict[tuple[str, str], None], discovered_by: list[tuple[str, str]], *, top: bool) -> None:
    for part in query.parts:
        inner_stream: str | None = None
        if part.kind == "service" and part.target_is_variable:
            if not top:
                raise RuleRejected(f"SERVICE {part.target} inside another SERVICE / REVISION / WINDOWS: a rule's "
                                   "SERVICE ?var inputs are discovered from the dataset, so they must be at the top "
                                   "level of the rule")
            if parse_extended(part.prefix).parts:
                raise RuleRejected(f"SERVICE {part.target}: its IRI depends on the result of another SERVICE / "
                                   "REVISION / WINDOWS, so the rule's inputs cannot be discovered from the dataset")
            discovered_by.append((part.prefix, part.target))
        elif part.kind == "service":
            if not evaluator.is_local(part.target):
                evaluator.check_reachable(part.target)  # a rule must not probe hosts off the allowlist (403)
            name, query_string = evaluator.local_stream(part.target)
            found = evaluator.windowed_input(part.target)
            if found is not None:
                constant[found] = None
            elif name is not None and windowed_params(query_string).windows is None:
                inner_stream = name
        elif part.kind == "windows" and stream is not None:
            ref = parse_window_ref(part.target)
            if ref.repeating:
                constant[(stream, str(ref))] = None
        if isinstance(part.inner, ExtendedQuery):
            _walk(part.inner, inner_stream, evaluator, constant, discovered_by, top=False)


def discover(analysis: RuleAnalysis, base: str, evaluator: ExtendedEvaluator) -> list[tuple[str, str]]:
    """The windowed inputs the dataset binds the rule's ``SERVICE ?var`` targets to, now (streams that exist)."""
    found: dict[tuple[str, str], None] = {}
    for prefix, variable in analysis.discovered_by:
        for row in evaluator.static_solutions(prefix, base).rows:
            value = row.get(variable[1:])
            if isinstance(value, NamedNode):
                windowed = evaluator.windowed_input(value.value)
                catalog = evaluator.catalog
                if windowed is not None and catalog is not None and catalog.find(windowed[0]) is not None:
                    found[windowed] = None
    return sorted(found)


@dataclass(frozen=True)
class RuleFile:
    """A ``.rq`` file: its text and what its leading comment lines declare (``# output: …`` is required;
    ``# report: …``, ``# operator: …`` and ``# publish: <MQTT topic>`` are optional)."""

    text: str
    output: str | None
    report: str | None = None
    operator: str | None = None
    publish: str | None = None


def rule_file(text: str) -> RuleFile:
    """Read the leading ``# key: value`` comment lines of a rule file."""
    declared: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep and key.strip().lower() in ("output", "report", "operator", "publish") and \
                key.strip().lower() not in declared:
            declared[key.strip().lower()] = value.strip()
    output = declared.get("output", "").strip("<>") or None
    return RuleFile(text, output, declared.get("report"), declared.get("operator"), declared.get("publish") or None)
