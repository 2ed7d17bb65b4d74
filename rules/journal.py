"""The rules' persistence: one append-only journal, ``<data>/rules/registry.jsonl``.

Each line is a record, replayed in order at start-up:

- ``{"op": "put", "rule": {…}}``: a rule as registered or changed (its text, output, inputs, status, ``fired``);
- ``{"op": "status", "name": …, "status": {…}, "fired": {…}}``: a rule's counters and ``fired`` marks since;
- ``{"op": "delete", "name": …}``.

A batch of records is one append and one fsync (registering 1,000 rules writes once, not 2,000 files), so a crash
leaves at most a torn last line, which start-up drops. When the journal holds more than twice the records its rules
need plus ``COMPACT_SLACK``, it is rewritten (atomically) as one ``put`` per rule.

Earlier versions kept ``NAME.rq`` (the text) and ``NAME.json`` (the rest) per rule; a directory of that layout is
moved into the journal once, its files renamed ``*.migrated`` (kept, not deleted).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from rules.model import Rule, RuleStatus, status_json
from store.durable import append_durably, write_bytes

log = logging.getLogger(__name__)

JOURNAL = "registry.jsonl"
COMPACT_SLACK = 1_000  # records beyond twice the rules' count before the journal is rewritten


def _line(record: dict[str, object]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def put_record(rule: Rule) -> dict[str, object]:
    return {"op": "put", "rule": {**rule.to_json(), "text": rule.text}}


def status_record(rule: Rule) -> dict[str, object]:
    return {"op": "status", "name": rule.name, "status": status_json(rule.status), "fired": dict(rule.fired)}


class RuleJournal:
    """Appends records durably, one write per batch; ``snapshot`` gives the rules a compaction writes (it must not
    take the registry's lock: the journal's lock is taken inside the registry's, never around it)."""

    def __init__(self, directory: Path, snapshot: Callable[[], list[Rule]]) -> None:
        self.path = directory / JOURNAL
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._records = 0  # lines in the file now

    def load(self) -> dict[str, Rule]:
        """The rules the journal holds (the old layout migrated first); a torn or unreadable line is dropped and
        the journal rewritten without it."""
        if not self.path.exists():
            self._migrate()
        rules: dict[str, Rule] = {}
        if not self.path.exists():
            return rules
        lines = self.path.read_bytes().split(b"\n")
        damaged = lines[-1] != b""  # the last append was cut short
        for number, line in enumerate(lines[:-1], 1):
            try:
                _apply(rules, json.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                log.warning("%s line %d is unreadable, left out: %s", self.path, number, error)
                damaged = True
        self._records = len(lines) - 1
        if damaged or self._records > 2 * len(rules) + COMPACT_SLACK:
            self._rewrite(list(rules.values()))
        return rules

    def put(self, rules: Iterable[Rule]) -> None:
        self._append([put_record(rule) for rule in rules])

    def statuses(self, rules: Iterable[Rule]) -> None:
        self._append([status_record(rule) for rule in rules])

    def delete(self, name: str) -> None:
        self._append([{"op": "delete", "name": name}])

    def _append(self, records: list[dict[str, object]]) -> None:
        if not records:
            return
        data = b"".join(_line(record) for record in records)
        with self._lock:
            append_durably(self.path, data)
            self._records += len(records)

    def compact_if_grown(self) -> None:
        """Rewrite the journal as one ``put`` per rule once it has grown past what they need (called after the
        registry holds what was appended, so the snapshot has it)."""
        with self._lock:
            if self._records > 2 * len(rules := self._snapshot()) + COMPACT_SLACK:
                self._rewrite(rules)

    def _rewrite(self, rules: list[Rule]) -> None:
        write_bytes(self.path, b"".join(_line(put_record(rule)) for rule in rules))
        self._records = len(rules)

    def _migrate(self) -> None:
        """Move rules of the old layout (``NAME.rq`` + ``NAME.json``) into the journal."""
        directory = self.path.parent
        pairs = [(meta, meta.with_suffix(".rq")) for meta in sorted(directory.glob("*.json"))
                 if meta.with_suffix(".rq").exists()]
        if not pairs:
            return
        rules = [Rule.from_json(text.read_text(encoding="utf-8"), json.loads(meta.read_text(encoding="utf-8")))
                 for meta, text in pairs]
        self._rewrite(rules)  # the journal is complete before any old file is renamed
        for meta, text in pairs:
            meta.rename(meta.with_name(meta.name + ".migrated"))
            text.rename(text.with_name(text.name + ".migrated"))
        log.warning("rules: %d rules moved from NAME.rq + NAME.json into %s (old files kept as *.migrated)",
                    len(rules), self.path)


def _apply(rules: dict[str, Rule], record: dict[str, object]) -> None:
    op = record["op"]
    if op == "put":
        data = record["rule"]
        assert isinstance(data, dict)
        rules[data["name"]] = Rule.from_json(data["text"], data)
    elif op == "status":
        rule = rules.get(str(record["name"]))
        if rule is not None:  # a status saved just before its rule was deleted
            rule.status = RuleStatus(**record["status"])  # type: ignore[arg-type]
            rule.fired = dict(record["fired"])  # type: ignore[call-overload]
    elif op == "delete":
        rules.pop(str(record["name"]), None)
    else:
        raise ValueError(f"unknown record {op!r}")
