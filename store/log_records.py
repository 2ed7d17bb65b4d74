"""The records of a stream's element log (``<data>/streams/<name>/log.jsonl``): written by the stream's committer,
read back by its recovery and by the Spark source (``pipeline.element_source``). One JSON object per line, with
short keys (the log is read on every batch):

- element ``{"o": ordinal, "t": µs, "g": graph (N-Triples form), "c": commit µs[, "f": origin]}`` (``f``: the rule
  firing that made it, for exactly-once outputs);
- punctuation ``{"p": µs, "c": commit µs}``: stream time has reached ``p``;
- registration of a window sequence ``{"r": sequence id, "h": last element ordinal before it, "c": commit µs}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class ElementRecord:
    """A committed element: its revision record."""

    ordinal: int
    time: int  # element timestamp, µs since the epoch
    graph: str  # N-Triples form: <iri> or _:label
    commit: int  # commit time, µs since the epoch
    origin: str | None = None  # the rule firing that made it ("rule/stream/sequence/window/position")


@dataclass(frozen=True)
class PunctuationRecord:
    time: int
    commit: int


@dataclass(frozen=True)
class RegistrationRecord:
    sequence: str
    head: int | None  # the last element ordinal before it: elements up to it are the sequence's history
    commit: int


LogRecord = ElementRecord | PunctuationRecord | RegistrationRecord


def encode(record: LogRecord) -> str:
    """One log line, without its newline.

    >>> encode(PunctuationRecord(5, 9))
    '{"p": 5, "c": 9}'
    """
    if isinstance(record, ElementRecord):
        data: dict[str, object] = {"o": record.ordinal, "t": record.time, "g": record.graph, "c": record.commit}
        if record.origin is not None:
            data["f"] = record.origin
    elif isinstance(record, PunctuationRecord):
        data = {"p": record.time, "c": record.commit}
    else:
        data = {"r": record.sequence, "h": record.head, "c": record.commit}
    return json.dumps(data)


def decode(line: bytes | str) -> LogRecord | None:
    """The record of a log line; ``None`` for a line that is not one (it is skipped, with a warning by the caller).

    >>> decode(b'{"o": 1, "t": 2, "g": "<http://ex/g>", "c": 3}')
    ElementRecord(ordinal=1, time=2, graph='<http://ex/g>', commit=3, origin=None)
    """
    try:
        data = json.loads(line)
        if "o" in data:
            return ElementRecord(data["o"], data["t"], data["g"], data.get("c", 0), data.get("f"))
        if "p" in data:
            return PunctuationRecord(data["p"], data.get("c", 0))
        if "r" in data:
            return RegistrationRecord(data["r"], data.get("h"), data.get("c", 0))
    except (ValueError, KeyError, TypeError):
        return None
    return None
