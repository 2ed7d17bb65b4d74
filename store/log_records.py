"""The records of a stream's element log (the ``.jsonl`` segments of ``<data>/streams/<name>/log/``, see
``store.element_log``): written by the stream's committer, read back by its recovery and, for other packages, by
``store.log_reading`` (the Spark source's records, as Arrow). One JSON object per line, with
short keys (the log is read on every batch):

- element ``{"o": ordinal, "t": µs, "g": graph (N-Triples form), "c": commit µs[, "f": origin], "d": offset,
  "n": length}`` (``f``: the rule firing that made it, for exactly-once outputs; ``d``/``n``: where its content is
  in the segment's ``.dat``, see ``store.element_log``);
- punctuation ``{"p": µs, "c": commit µs}``: stream time has reached ``p``;
- registration of a window sequence ``{"r": sequence id, "h": last element ordinal before it, "c": commit µs}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: Each key of a record line and its JSON value's type, as pyarrow names it: what a columnar reader of the log parses
#: (``store.log_reading``).
KEY_TYPES: dict[str, str] = {"o": "int64", "t": "int64", "g": "string", "c": "int64", "f": "string", "d": "int64",
                             "n": "int64", "p": "int64", "r": "string", "h": "int64"}


@dataclass(frozen=True)
class ElementRecord:
    """A committed element: its revision record."""

    ordinal: int
    time: int  # element timestamp, µs since the epoch
    graph: str  # N-Triples form: <iri> or _:label
    commit: int  # commit time, µs since the epoch
    origin: str | None = None  # the rule firing that made it ("rule/stream/sequence/window/position")
    content: tuple[int, int] | None = None  # (offset, length) of its content in its segment's .dat


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


def encode(record: LogRecord, content: tuple[int, int] | None = None) -> str:
    """One log line, without its newline; ``content``: an element's (offset, length), instead of its record's.

    >>> encode(PunctuationRecord(5, 9))
    '{"p": 5, "c": 9}'
    """
    if isinstance(record, ElementRecord):  # written by hand: one per element on the upload path (json.dumps: 2×)
        line = f'{{"o": {record.ordinal}, "t": {record.time}, "g": {json.dumps(record.graph)}, "c": {record.commit}'
        if record.origin is not None:
            line += f', "f": {json.dumps(record.origin)}'
        content = record.content if content is None else content
        if content is not None:
            line += f', "d": {content[0]}, "n": {content[1]}'
        return line + "}"
    if isinstance(record, PunctuationRecord):
        data: dict[str, object] = {"p": record.time, "c": record.commit}
    else:
        data = {"r": record.sequence, "h": record.head, "c": record.commit}
    return json.dumps(data)


def decode(line: bytes | str) -> LogRecord | None:
    """The record of a log line; ``None`` for a line that is not one (it is skipped, with a warning by the caller).

    >>> decode(b'{"o": 1, "t": 2, "g": "<http://ex/g>", "c": 3, "d": 0, "n": 80}')
    ElementRecord(ordinal=1, time=2, graph='<http://ex/g>', commit=3, origin=None, content=(0, 80))
    """
    try:
        data = json.loads(line)
        if "o" in data:
            content = (data["d"], data["n"]) if "d" in data else None
            return ElementRecord(data["o"], data["t"], data["g"], data.get("c", 0), data.get("f"), content)
        if "p" in data:
            return PunctuationRecord(data["p"], data.get("c", 0))
        if "r" in data:
            return RegistrationRecord(data["r"], data.get("h"), data.get("c", 0))
    except (ValueError, KeyError, TypeError):
        return None
    return None
