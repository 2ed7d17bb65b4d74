"""The rule graph: every registered rule is an edge from each stream it reads (its windows' and its EVENTs') to its
output stream. The graph has no cycle through a window rule: registration refuses a batch whose rules would close
one (``RuleCycle``, 409), and input discovery leaves out an input that would (``reaches``). Cycles made of event
rules alone are allowed: their recursion stops at a derivation depth (docs/events.md, rules/event_rules.py)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence

from rules.errors import RuleCycle
from rules.model import Rule

#: what a rule of a batch adds to the graph: (its name, the streams it reads, its output stream)
Edges = tuple[str, Iterable[str], str]


class RuleGraph:
    """Which registered rules read each stream, and the stream each outputs. Not thread-safe: the registry calls it
    under its lock."""

    def __init__(self) -> None:
        self._readers: dict[str, dict[str, str]] = {}  # stream -> {name of a rule reading it: that rule's output}
        self._event_rules: set[str] = set()  # rules that may be on a cycle (event rules, their depth bounded)

    def add(self, rule: Rule) -> None:
        for stream in reads(rule):
            self._readers.setdefault(stream, {})[rule.name] = rule.output
        if rule.events:
            self._event_rules.add(rule.name)

    def remove(self, rule: Rule) -> None:
        for stream in reads(rule):
            readers = self._readers.get(stream)
            if readers is not None:
                readers.pop(rule.name, None)
                if not readers:
                    del self._readers[stream]
        self._event_rules.discard(rule.name)

    def readers(self, stream: str) -> list[str]:
        """The names of the rules reading ``stream``, sorted."""
        return sorted(self._readers.get(stream, ()))

    def refuse_cycles(self, batch: Sequence[Edges], event_rules: Collection[str] = ()) -> None:
        """Refuse a cycle through a window rule (``event_rules``: the batch's event rules, which may be on cycles).

        A rule on a cycle has both its streams in one strongly connected component. The graph without the batch has
        no forbidden cycle, so a new one goes through a batch rule's output: one search (Tarjan's, iterative: a long
        chain of rules must not exhaust the stack) from those, over the graph with the batch's rules in place of the
        ones they replace."""
        replaced = {name for name, _, _ in batch}
        bounded = (self._event_rules - replaced) | set(event_rules)
        added: dict[str, list[tuple[str, str]]] = {}
        for name, streams, output in batch:
            for stream in streams:
                added.setdefault(stream, []).append((name, output))

        def edges(stream: str) -> list[tuple[str, str]]:  # (rule, the stream it outputs)
            kept = [(name, output) for name, output in self._readers.get(stream, {}).items() if name not in replaced]
            return kept + added.get(stream, [])

        component = _components([output for _, _, output in batch], edges)
        for stream, group in component.items():
            for name, output in edges(stream):
                if name not in bounded and component.get(output) == group:
                    streams, names = _path(output, stream, edges, component)
                    streams, names = [stream, *streams], [name, *names]
                    culprit = next((n for n in names if n in replaced), name)
                    path = "".join(f"{s} -[{n}]-> " for s, n in zip(streams, names, strict=True))
                    raise RuleCycle(f"rule {culprit!r}: its output stream feeds its own inputs (a cycle: "
                                    f"{path}{streams[0]}); rule {name!r} on it fires on windows, and only event "
                                    "rules may be on a cycle (their recursion stops at depth=)", rule=culprit)

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


def _components(starts: list[str], edges: Callable[[str], list[tuple[str, str]]]) -> dict[str, int]:
    """The strongly connected component of each stream reachable from ``starts`` (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    for start in starts:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        work = [(start, iter(edges(start)))]
        while work:
            stream, pending = work[-1]
            step = next(pending, None)
            if step is not None:
                target = step[1]
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(edges(target))))
                elif target not in component:
                    low[stream] = min(low[stream], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[stream])
            if low[stream] == index[stream]:
                while True:
                    member = stack.pop()
                    component[member] = index[stream]
                    if member == stream:
                        break
    return component


def _path(start: str, end: str, edges: Callable[[str], list[tuple[str, str]]],
          component: dict[str, int]) -> tuple[list[str], list[str]]:
    """A shortest path from ``start`` to ``end`` in their component: its streams (``start`` first, ``end`` left
    out) and the rules from each to the next."""
    came: dict[str, tuple[str, str]] = {}
    queue = deque([start])
    seen = {start}
    while queue and end not in came and start != end:
        stream = queue.popleft()
        for name, output in edges(stream):
            if output not in seen and component.get(output) == component[start]:
                seen.add(output)
                came[output] = (stream, name)
                queue.append(output)
    streams: list[str] = []
    names: list[str] = []
    at = end
    while at != start:
        previous, name = came[at]
        streams.insert(0, previous)
        names.insert(0, name)
        at = previous
    return streams, names
