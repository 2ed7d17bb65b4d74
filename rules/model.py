"""What a rule is: its text, output stream, windowed inputs and status (rules/registry.py registers them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparql_ext.histogram import Histogram
from sparql_ext.reporting import ReportSpec, parse_report


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
    waiting: int = 0  # firings skipped because another input had no complete window yet
    executor_firings: int = 0  # firings evaluated in Spark executors (rules/tasks.py)
    placement: str | None = None  # "executors" or "driver: why" (set at the first firing)
    last_latency_ms: float | None = None
    last_error: str | None = None
    last_window: str | None = None
    log: list[str] = field(default_factory=list)  # the latest errors, newest last


def status_json(status: RuleStatus) -> dict[str, object]:
    """A status as JSON (what ``dataclasses.asdict`` gives, at a fraction of its cost: it is saved per firing)."""
    return {**vars(status), "log": list(status.log)}


@dataclass
class Rule:
    name: str
    text: str
    output: str  # stream name
    base: str  # this server's base URL when registered (resolves local stream IRIs)
    inputs: list[RuleInput]
    status: RuleStatus = field(default_factory=RuleStatus)
    discovers: bool = False  # has SERVICE ?var inputs, re-discovered when the data changes
    report: str | None = None  # report policy (sparql_ext.reporting), None: window-close
    operator: str | None = None  # stream operator, None: rstream
    # "stream/sequence" -> index of the last window the rule fired on (at registration: the latest committed, so
    # a new rule fires on what completes from then on); start-up fires what came after (RuleRunner.catch_up)
    fired: dict[str, int] = field(default_factory=dict)
    publish: str | None = None  # an MQTT topic its output elements are published to (connectors.mqtt_out)
    # every successful firing's latency in seconds, since start-up (not saved: /metrics counts from start-up)
    latency: Histogram = field(default_factory=Histogram, compare=False)
    events: list[str] = field(default_factory=list)  # streams its EVENTs read: an event rule (rules/event_rules.py)
    # an event rule's options (sparql_ext.event_schedule): its evaluation times, where its matching starts, the
    # depth bound of its recursion; None: at every element, after the HEAD of registration, the default bound
    evaluate: str | None = None
    replay_from: str | None = None
    depth: int | None = None

    @property
    def event_options(self) -> tuple[str | None, str | None, int | None]:
        return self.evaluate, self.replay_from, self.depth

    def to_json(self) -> dict[str, object]:
        # fired is copied: firing threads add marks while another thread saves (dict() copies atomically); the
        # status's fields are flat (its log is replaced, never changed in place), so asdict's deep copy is not needed
        return {"name": self.name, "output": self.output, "base": self.base, "discovers": self.discovers,
                "report": self.report, "operator": self.operator, "fired": dict(self.fired), "publish": self.publish,
                "inputs": [dict(vars(i)) for i in self.inputs], "status": status_json(self.status),
                "events": self.events, "evaluate": self.evaluate, "from": self.replay_from, "depth": self.depth}

    @classmethod
    def from_json(cls, text: str, data: dict) -> Rule:  # type: ignore[type-arg]
        return cls(data["name"], text, data["output"], data["base"], [RuleInput(**i) for i in data["inputs"]],
                   RuleStatus(**data.get("status", {})), data.get("discovers", False), data.get("report"),
                   data.get("operator"), dict(data.get("fired", {})), data.get("publish"),
                   events=list(data.get("events", [])), evaluate=data.get("evaluate"),
                   replay_from=data.get("from"), depth=data.get("depth"))

    @property
    def report_spec(self) -> ReportSpec:
        return parse_report(self.report, self.operator)
