"""The rule graph: every registered rule is an edge from each stream it reads (its windows' and its EVENTs') to its
output stream. The graph has no cycle: registration refuses a batch whose rules would close one (``RuleCycle``,
409), and input discovery leaves out an input that would (``reaches``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rules.analysis import find_cycle
from rules.errors import RuleCycle
from rules.model import Rule

#: what a rule of a batch adds to the graph: (its name, the streams it reads, its output stream)
Edges = tuple[str, Iterable[str], str]


class RuleGraph:
    """Which registered rules read each stream, and the stream each outputs. Not thread-safe: the registry calls it
    under its lock."""

    def __init__(self) -> None:
        self._readers: dict[str, dict[str, str]] = {}  # stream -> {name of a rule reading it: that rule's output}

    def add(self, rule: Rule) -> None:
        for stream in reads(rule):
            self._readers.setdefault(stream, {})[rule.name] = rule.output

    def remove(self, rule: Rule) -> None:
        for stream in reads(rule):
            readers = self._readers.get(stream)
            if readers is not None:
                readers.pop(rule.name, None)
                if not readers:
                    del self._readers[stream]

    def readers(self, stream: str) -> list[str]:
        """The names of the rules reading ``stream``, sorted."""
        return sorted(self._readers.get(stream, ()))

    def refuse_cycles(self, batch: Sequence[Edges]) -> None:
        """One depth-first search of the graph with the batch's rules in place of the ones they replace. The graph
        without the batch has no cycle, so a cycle goes through a batch rule's output: the search starts from
        those."""
        replaced = {name for name, _, _ in batch}
        added: dict[str, list[tuple[str, str]]] = {}
        for name, streams, output in batch:
            for stream in streams:
                added.setdefault(stream, []).append((name, output))

        def edges(stream: str) -> list[tuple[str, str]]:  # (rule, the stream it outputs)
            kept = [(name, output) for name, output in self._readers.get(stream, {}).items() if name not in replaced]
            return kept + added.get(stream, [])

        done: set[str] = set()
        for _, _, output in batch:
            cycle = find_cycle(output, edges, done)
            if cycle is not None:
                streams, names = cycle
                culprit = next((name for name in names if name in replaced), names[0])
                path = "".join(f"{stream} -[{name}]-> " for stream, name in zip(streams, names, strict=True))
                raise RuleCycle(f"rule {culprit!r}: its output stream feeds its own inputs (a cycle: "
                                f"{path}{streams[0]})", rule=culprit)

    def reaches(self, start: str, targets: set[str], exclude: str) -> bool:
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
            frontier.extend(output for name, output in self._readers.get(stream, {}).items() if name != exclude)
        return False


def reads(rule: Rule) -> set[str]:
    """The streams a registered rule reads (the graph's edges into it)."""
    return {item.stream for item in rule.inputs} | set(rule.events)
