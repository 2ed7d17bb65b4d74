"""Which elements of a stream a windowed IRI or a revision designator selects (the protocol turns a selection
into response headers).

A one-shot WindowRef (``HEAD/-PT05M``, a datetime interval, ``HEAD~9/HEAD``) is an index look-up,
waiting up to ``timeout`` seconds for a prospective window to complete; a repeating one (``R…``)
is the latest complete window revision of a registered sequence of that ref (registered when there is none).
Each selection carries the window's *commit time*, what ``THEN()`` returns over it.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import WindowNotComplete
from sparql_ext import Head, Instant, Ordinal, RevisionId, parse_revision
from sparql_ext.windowing import WindowNotResolvable, is_complete, resolve, to_micros, window
from sparql_ext.windowref import parse_window_ref
from store.durable import now_micros
from store.errors import RevisionNotFound
from store.stream import Stream
from store.windows import Sequence, WindowRevision


@dataclass
class SelectedWindow:
    """The elements a windowed IRI (or a stream revision) denotes, and which window they are."""

    ordinals: list[int]
    commit: int | None = None  # µs: when the concentrator had received all its elements (THEN())
    kind: str | None = None  # the window's kind ("time": bounds in µs; "count": ordinals); None: not a window
    start: int | None = None
    end: int | None = None
    index: int | None = None  # a window revision's index in its sequence, and its UUID
    revision_id: str | None = None


def select_window(stream: Stream, text: str, timeout: float, sequence_id: str | None = None) -> SelectedWindow:
    """The elements of ``stream?WINDOWS=text``: a one-shot window from the timestamp index (waiting
    for a prospective one to complete), or the latest complete window of a repeating sequence: ``sequence_id``'s
    (a rule reads its own), else the freshest of those registered with this ref, else a new one."""
    ref = parse_window_ref(text)
    if ref.repeating:
        sequence = latest_sequence(stream, str(ref), sequence_id)
        if sequence is None:
            sequence = stream.register(str(ref), resolve(ref, stream))
        stream.windows.touch(sequence.id)
        revision = stream.windows.latest(sequence.id) or stream.windows.wait_for_window(sequence.id, 0, timeout)
        if revision is None:
            raise WindowNotComplete(
                f"WINDOWS={text}: no window of this sequence has completed within {timeout:g} s (it is registered "
                "and will materialize as stream time passes; retry, raise timeout=, or punctuate the stream)")
        return revision_window(sequence.spec.kind, revision)
    spec = resolve(ref, stream)
    k = spec.first

    def complete() -> bool:
        return is_complete(spec, k, stream, watermark(stream))

    if not complete() and not stream.wait_for(complete, timeout):
        raise WindowNotComplete(
            f"WINDOWS={text}: the window is not complete after {timeout:g} s: stream time has not reached its end "
            "(send later elements or a punctuation, or raise timeout=)")
    selected = window(spec, k, stream)
    if selected is None:
        raise WindowNotResolvable(f"WINDOWS={text}: the window's anchor element is not in the stream")
    ordinals = list(selected.elements)
    return SelectedWindow(ordinals, _commit_of(stream, ordinals[-1] if ordinals else stream.head()), spec.kind,
                          selected.start, selected.end)


def latest_sequence(stream: Stream, ref: str, sequence_id: str | None = None) -> Sequence | None:
    """The sequence a one-shot request to a repeating ref reads: ``sequence_id`` if given and live, else the one
    of those registered with ``ref`` (at different HEADs) whose latest window ends last, else the newest."""
    if sequence_id is not None and (own := stream.windows.sequence(sequence_id)) is not None:
        return own
    candidates = stream.windows.with_ref(ref)
    if not candidates:
        return None

    def freshness(sequence: Sequence) -> tuple[int, int]:
        latest = stream.windows.latest(sequence.id)
        return (latest.end if latest is not None else -(1 << 62), sequence.registered)

    return max(candidates, key=freshness)


def revision_window(kind: str, revision: WindowRevision) -> SelectedWindow:
    """A materialized window revision as a selection."""
    return SelectedWindow(list(revision.ordinals()), revision.commit, kind, revision.start, revision.end,
                          revision.index, revision.uuid)


def revision_selection(stream: Stream, designator_text: str | None) -> SelectedWindow:
    """The stream as a dataset at a revision (default HEAD): its retained elements up to it, with the commit time
    of the last one (``THEN()`` over it)."""
    last = stream.head()
    if designator_text is not None:
        designator = parse_revision(designator_text)
        found: int | None
        if isinstance(designator, Head):
            found = stream.head() - designator.back
        elif isinstance(designator, Ordinal):
            found = designator.number if designator.number <= stream.head() else None
        elif isinstance(designator, RevisionId):
            found = stream.ordinal_of(designator.uuid)
        else:
            assert isinstance(designator, Instant)
            found = stream.last_at_or_before(to_micros(designator.at))
        if found is None or found < stream.first_ordinal - 1:
            raise RevisionNotFound(
                f"revision-id={designator_text} names no retained element of stream {stream.config.name!r}")
        last = found
    return SelectedWindow(list(range(stream.first_ordinal, last + 1)), _commit_of(stream, last))


def watermark(stream: Stream) -> int | None:
    return None if stream.stream_time is None else stream.stream_time - stream.config.lateness


def _commit_of(stream: Stream, ordinal: int) -> int:
    """Commit time of an element; for an empty selection of an empty stream, now."""
    record = stream.record(ordinal)
    return record.commit if record is not None else now_micros()


def elements_key(stream: Stream, selected: SelectedWindow) -> str:
    """A key naming exactly the selected elements of ``stream``: its identity, then the window revision's UUID (a
    revision's elements never change) or, for a selection that is not a window revision, the ordinals as runs."""
    identity = f"{stream.config.name}/{stream.config.uuid_prefix:x}"
    if selected.revision_id is not None:
        return f"{identity}@{selected.revision_id}"
    runs: list[str] = []
    first = previous = None
    for ordinal in selected.ordinals:
        if previous is not None and ordinal == previous + 1:
            previous = ordinal
            continue
        if first is not None:
            runs.append(f"{first}-{previous}")
        first = previous = ordinal
    if first is not None:
        runs.append(f"{first}-{previous}")
    return f"{identity}:{','.join(runs)}"
