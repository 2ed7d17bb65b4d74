"""``concentrator replay``: run recorded streams through rules on Spark, offline, and write the rules' outputs.

Each recorded FILE (TriG or N-Quads with timestamp triples, as uploaded to a stream) becomes the stream named by
its file stem (``--alias NAME=IRI`` maps the IRIs the rules or the base data use for it; an alias for a NAME
without a file makes an empty stream, e.g. the sensors of patients not in the recording). The elements of all
files are fed in timestamp order (so windows of different streams complete in the order they would live),
then every stream is punctuated past the end of its widest window, the pipeline and the rules are let run
until nothing more happens, and every rule output stream is written to ``--out`` as TriG. The same parts as
``concentrator serve`` (store, Spark pipeline, rules), in a scratch data directory, without HTTP.
"""

from __future__ import annotations

import heapq
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyoxigraph import RdfFormat, serialize

from store.durable import now_micros
from store.elements import ParsedElement
from store.framing import ElementFramer

if TYPE_CHECKING:
    from rules.tasks import Placement

BASE = "http://replay.invalid"  # the replay's base URL: rules' <streams/NAME?…> resolve to its streams
QUIET_SECONDS = 3.0
PROGRESS_SECONDS = 5.0  # between two progress lines on a terminal


@dataclass
class ReplaySummary:
    elements: int
    windows: int
    outputs: dict[str, int]  # output stream -> elements
    seconds: float


def _elements(path: Path, stream: str, predicate: str) -> Iterator[tuple[int, str, ParsedElement]]:
    rdf_format = RdfFormat.N_QUADS if path.suffix in (".nq", ".nquads") else RdfFormat.TRIG
    with path.open("rb") as source:
        for element in ElementFramer(source, rdf_format, predicate, base_iri=f"{BASE}/streams/{stream}"):
            if element.time is None:
                raise ValueError(f"{path}: element {element.graph} has no timestamp (a recording needs them)")
            yield element.time, stream, element


def replay(files: list[Path], rules_dir: Path, out: Path, *, base_data: Path | None = None,
           aliases: dict[str, list[str]] | None = None, spark_master: str = "local[2]",
           rules_on: Placement = "auto", progress: bool = True, timeout: float = 600.0) -> ReplaySummary:
    from concentrator.compose import assemble
    from protocol.services import ServerConfig, Services
    from store.stream_config import StreamConfig

    started = time.monotonic()
    names = [path.stem for path in files]

    def prepare(services: Services) -> None:
        if base_data is not None:
            rdf_format = RdfFormat.from_extension(base_data.suffix.lstrip(".")) or RdfFormat.TRIG
            with base_data.open("rb") as source:
                services.dataset.add(services.dataset.stage(source, rdf_format))
        for name in dict.fromkeys([*names, *(aliases or {})]):  # an alias without a file: an empty stream
            services.streams.put(StreamConfig(name, aliases=(aliases or {}).get(name, [])))

    # The server is closed before its scratch directory is removed: the pipeline (its batches write to the
    # streams), then the streams and the dataset (their stores write files until closed).
    with ExitStack() as closing:
        data = Path(closing.enter_context(tempfile.TemporaryDirectory(prefix="concentrator-replay-")))
        # no rule, no output: the elements are still read (and checked), but Spark has nothing to do
        has_rules = any(rules_dir.glob("*.rq"))
        server = assemble(ServerConfig(data), spark_master=spark_master if has_rules else None, rules_dir=rules_dir,
                          base_url=BASE, rules_on=rules_on, prepare=prepare)
        closing.callback(server.close)
        if server.rule_errors:
            raise ValueError("rules not loaded:\n" + "\n".join(server.rule_errors))
        server.start()
        catalog, registry = server.services.streams, server.services.rules
        report = _Progress(progress)
        total = _feed(files, names, catalog, report)
        _punctuate(catalog, names)
        windows = 0
        if server.pipeline is not None:
            windows = _settle(catalog, registry, server.pipeline, report, total, started + timeout)
        outputs = {rule.output for rule in registry.rules()}
        counts = _write(catalog, sorted(outputs), out)
    return ReplaySummary(total, windows, counts, round(time.monotonic() - started, 1))


class _Progress:
    """Progress lines on stderr, each a line of its own (Spark's log lines go to the same stderr: a line rewritten in
    place with ``\\r`` would be glued to them), at most one every ``PROGRESS_SECONDS``; none when ``enabled`` is
    False (``concentrator replay`` passes whether stderr is a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._next = time.monotonic() + PROGRESS_SECONDS

    def __call__(self, text: str) -> None:
        if self.enabled and time.monotonic() >= self._next:
            self._next = time.monotonic() + PROGRESS_SECONDS
            print(f"replay: {text}", file=sys.stderr, flush=True)


def _feed(files: list[Path], names: list[str], catalog, report: _Progress) -> int:  # type: ignore[no-untyped-def]
    streams = {name: catalog.get(name) for name in names}
    merged = heapq.merge(*(_elements(path, name, streams[name].config.timestamp_predicate)
                           for path, name in zip(files, names, strict=True)), key=lambda item: item[0])
    count = 0
    for _, name, element in merged:
        streams[name].accept(element, now_micros())
        count += 1
        if count % 500 == 0:
            report(f"{count:,} elements fed")
    for stream in streams.values():
        stream.flush()
    return count


def _punctuate(catalog, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Stream time past the end of every window that holds a recorded element: all of them complete."""
    for name in names:
        stream = catalog.get(name)
        widest = max((s.spec.window_kind.settle_span for s in stream.windows.sequences()), default=0)
        if stream.stream_time is None or widest == 0:
            continue  # no element, or only count / one-shot windows: nothing waits for stream time
        stream.punctuate(stream.stream_time + widest)
        stream.flush()


def _settle(catalog, registry, pipeline, report: _Progress, total: int, deadline: float) -> int:  # type: ignore[no-untyped-def]
    """Wait until the pipeline and the rules are quiet (chained rules' outputs take further batches)."""
    def snapshot() -> tuple[int, ...]:
        windows = sum(stream.windows.emitted(s.id) for name in catalog.names()
                      for stream in [catalog.get(name)] for s in stream.windows.sequences())
        return (windows, sum(r.status.firings + r.status.waiting + r.status.failures for r in registry.rules()),
                sum(len(catalog.get(n)) for n in catalog.names()))

    last, quiet_since = snapshot(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = snapshot()
        report(f"{total:,} elements fed, {now[0]:,} windows, {now[1]:,} firings")
        caught_up = all(pipeline.caught_up(catalog.get(name)) for name in catalog.names())
        if now != last or not caught_up:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_SECONDS:
            return now[0]
    raise TimeoutError("the replay did not settle before its timeout")


def _write(catalog, outputs: list[str], out: Path) -> dict[str, int]:  # type: ignore[no-untyped-def]
    counts = {}
    with out.open("wb") as sink:
        for name in outputs:
            stream = catalog.get(name)
            ordinals = list(range(stream.first_ordinal, stream.head() + 1)) if len(stream) else []
            serialize(stream.dataset_quads(ordinals), sink, RdfFormat.TRIG)
            counts[name] = len(ordinals)
    return counts
