"""The reference window semantics, worked by hand (docs/streams.md, "WindowRef": forms, bounds, completeness).

Streams are small and their timestamps are whole minutes after 2016-06-20T10:00:00Z; every expected
window is written out literally, with the arithmetic in a comment.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparql_ext import (
    Element,
    EventPatternError,
    ListIndex,
    Window,
    WindowNotResolvable,
    WindowRefSyntaxError,
    WindowSpec,
    bind_origin,
    bounds,
    from_micros,
    is_complete,
    parse_window_ref,
    resolve,
    to_micros,
    window,
    windows,
)
from sparql_ext.event_windows import event_window_form

BASE = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs since the epoch (1466416800 s)
MIN = 60_000_000


def m(minutes: float) -> int:
    """The instant `minutes` after 10:00 (µs)."""
    return BASE + round(minutes * MIN)


def stream(*minutes: float, uuids: dict[uuid.UUID, int] | None = None) -> ListIndex:
    """Element n at the n-th of `minutes`."""
    return ListIndex.of_times([m(x) for x in minutes], uuids)


def tw(k: int, start: float, end: float, *ordinals: int) -> Window:
    """A time window, bounds in minutes."""
    return Window(k, m(start), m(end), ordinals)


def spec_of(ref: str, index: ListIndex) -> WindowSpec:
    return resolve(parse_window_ref(ref), index)


TEN = stream(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)  # ordinals 1..10 at minutes 0..9 (ordinal n at minute n-1)


def test_micros() -> None:
    assert to_micros(datetime(2016, 6, 20, 10, tzinfo=UTC)) == BASE
    assert from_micros(BASE + 1) == datetime(2016, 6, 20, 10, 0, 0, 1, tzinfo=UTC)
    assert to_micros(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == -1
    with pytest.raises(ValueError):
        to_micros(datetime(2016, 6, 20, 10))


def test_list_index() -> None:
    index = stream(0, 1, 3)
    assert index.head() == 3 and stream().head() == 0
    assert index.time_of(3) == m(3) and index.time_of(0) is None and index.time_of(4) is None
    assert index.last_at_or_before(m(2)) == 2 and index.last_at_or_before(m(3)) == 3
    assert index.last_at_or_before(m(-1)) is None
    assert [e.ordinal for e in index.between(m(1), m(3), backward=False)] == [2]
    assert [e.ordinal for e in index.between(m(1), m(3), backward=True)] == [3]
    assert index.elements(2, 9) == [Element(2, m(1)), Element(3, m(3))]
    with pytest.raises(ValueError):
        ListIndex([Element(2, 0)])


def test_sliding_forward() -> None:
    # Registered when the stream had minutes 0,1,2: HEAD = ordinal 3, t0 = minute 2.
    spec = spec_of("R/HEAD/PT05M/PT01M", stream(0, 1, 2))
    assert spec == WindowSpec("R/HEAD/PT5M/PT1M", "time", False, m(2), 5 * MIN, MIN, "time", 0, None, 3)
    # window k = [2+k, 7+k); with w = minute 9, complete while 7+k <= 9, i.e. k = 0, 1, 2.
    assert windows(spec, TEN, m(9)) == [
        tw(0, 2, 7, 3, 4, 5, 6, 7),  # minutes 2..6
        tw(1, 3, 8, 4, 5, 6, 7, 8),  # minutes 3..7
        tw(2, 4, 9, 5, 6, 7, 8, 9),  # minutes 4..8; the element at minute 9 is at the end: excluded
    ]
    assert not is_complete(spec, 3, TEN, m(9))  # [5, 10)


def test_sliding_backward() -> None:
    spec = spec_of("R/HEAD/-PT05M/PT01M", stream(0, 1, 2))
    assert (spec.backward, spec.origin, spec.first) == (True, m(2), 1)
    # window k = (2+k-5, 2+k], k >= 1; with w = minute 9, complete while 2+k <= 9, i.e. k = 1..7.
    assert windows(spec, TEN, m(9)) == [
        tw(1, -2, 3, 1, 2, 3, 4),  # minutes 0..3
        tw(2, -1, 4, 1, 2, 3, 4, 5),  # minutes 0..4
        tw(3, 0, 5, 2, 3, 4, 5, 6),  # minute 0 is at the (excluded) start: minutes 1..5
        tw(4, 1, 6, 3, 4, 5, 6, 7),
        tw(5, 2, 7, 4, 5, 6, 7, 8),
        tw(6, 3, 8, 5, 6, 7, 8, 9),
        tw(7, 4, 9, 6, 7, 8, 9, 10),  # end inclusive: the element at minute 9 is in
    ]


def test_tumbling() -> None:
    spec = spec_of("R/HEAD/PT05M", stream(0))  # t0 = minute 0, step = width = 5 minutes
    assert (spec.step, spec.step_kind) == (5 * MIN, "time")
    assert windows(spec, TEN, m(9)) == [tw(0, 0, 5, 1, 2, 3, 4, 5)]  # [5, 10) needs w >= 10
    assert windows(spec, TEN, m(10)) == [tw(0, 0, 5, 1, 2, 3, 4, 5), tw(1, 5, 10, 6, 7, 8, 9, 10)]


def test_hopping_with_gaps() -> None:
    spec = spec_of("R/HEAD/PT01M/PT05M", stream(0))
    # window k = [5k, 5k+1): minutes 1-4 and 6-9 fall in the gaps
    assert windows(spec, TEN, m(9)) == [tw(0, 0, 1, 1), tw(1, 5, 6, 6)]
    assert windows(spec, TEN, m(11)) == [tw(0, 0, 1, 1), tw(1, 5, 6, 6), tw(2, 10, 11)]  # empty window kept


def test_count_window_sliding_by_one() -> None:
    twelve = stream(*range(12))  # ordinals 1..12
    spec = spec_of("R/HEAD~9/HEAD/1", twelve)
    # HEAD = 12, HEAD~9 = 3: width 12-3+1 = 10, window k = ordinals [3+k, 12+k]
    assert spec == WindowSpec("R/HEAD~9/HEAD/1", "count", False, 3, 10, 1, "count", 0, None)
    assert windows(spec, twelve, None) == [Window(0, 3, 12, tuple(range(3, 13)))]
    fourteen = stream(*range(14))
    assert windows(spec, fourteen, None) == [
        Window(0, 3, 12, (3, 4, 5, 6, 7, 8, 9, 10, 11, 12)),
        Window(1, 4, 13, (4, 5, 6, 7, 8, 9, 10, 11, 12, 13)),
        Window(2, 5, 14, (5, 6, 7, 8, 9, 10, 11, 12, 13, 14)),
    ]


def test_count_window_registered_on_a_short_stream_skips_windows_before_ordinal_1() -> None:
    # 5 elements: HEAD~9 = -4, window k = [-4+k, 5+k]; k = 0..4 start before 1, so first = 5: [1, 10]
    spec = spec_of("R/HEAD~9/HEAD/1", stream(0, 1, 2, 3, 4))
    assert (spec.origin, spec.width, spec.first) == (-4, 10, 5)
    assert windows(spec, stream(*range(9)), None) == []
    assert windows(spec, TEN, None) == [Window(5, 1, 10, (1, 2, 3, 4, 5, 6, 7, 8, 9, 10))]
    # step 3: windows start at -4+3k; k = 2 starts at 2 (k = 1 would start at -1)
    assert spec_of("R/HEAD~9/HEAD/3", stream(0, 1, 2, 3, 4)).first == 2


def test_exactly_three_windows() -> None:
    spec = spec_of("R3/HEAD/PT02M/PT01M", stream(0))
    # [k, k+2) for k = 0, 1, 2 only, although w = 9 would complete k up to 7
    assert windows(spec, TEN, m(9)) == [tw(0, 0, 2, 1, 2), tw(1, 1, 3, 2, 3), tw(2, 2, 4, 3, 4)]


def test_past_datetime_anchor_replays_then_continues() -> None:
    # Elements at minutes -2, 0, 3, 4 were stored before registration; 6, 8, 11 arrive after it.
    before = stream(-2, 0, 3, 4)
    after = stream(-2, 0, 3, 4, 6, 8, 11)
    spec = spec_of("R/2016-06-20T10:00:00Z/PT05M/PT01M", before)
    assert (spec.origin, spec.anchor, spec.first) == (m(0), None, 0)  # t0 is the instant itself
    assert windows(spec, before, m(4)) == []  # [0, 5) needs w >= 5
    assert windows(spec, after, m(5)) == [tw(0, 0, 5, 2, 3, 4)]
    # window k = [k, k+5); w = minute 11 completes k = 0..6; the element at minute -2 is in none
    assert windows(spec, after, m(11)) == [
        tw(0, 0, 5, 2, 3, 4),  # minutes 0, 3, 4
        tw(1, 1, 6, 3, 4),  # 3, 4
        tw(2, 2, 7, 3, 4, 5),  # 3, 4, 6
        tw(3, 3, 8, 3, 4, 5),  # 3, 4, 6
        tw(4, 4, 9, 4, 5, 6),  # 4, 6, 8
        tw(5, 5, 10, 5, 6),  # 6, 8
        tw(6, 6, 11, 5, 6),  # 6, 8; minute 11 is at the end
    ]


def test_one_shot_backward() -> None:
    spec = spec_of("HEAD/-PT05M", TEN)
    # t0 = t(HEAD) = minute 9: (4, 9] holds minutes 5..9; complete at once (w = 9 = end)
    assert (spec.kind, spec.backward, spec.first, spec.count) == ("time", True, 0, 1)
    assert windows(spec, TEN, m(9)) == [tw(0, 4, 9, 6, 7, 8, 9, 10)]


def test_one_shot_element_ranges() -> None:
    twelve = stream(*range(12))
    assert windows(spec_of("HEAD~9/HEAD", twelve), twelve, None) == [Window(0, 3, 12, tuple(range(3, 13)))]
    assert windows(spec_of("HEAD", twelve), twelve, None) == [Window(0, 12, 12, (12,))]
    assert windows(spec_of("4/6", twelve), twelve, None) == [Window(0, 4, 6, (4, 5, 6))]
    # the last 10 of 5 elements are those 5 (a one-shot range is clipped at ordinal 1)
    five = stream(0, 1, 2, 3, 4)
    assert windows(spec_of("HEAD~9/HEAD", five), five, None) == [Window(0, 1, 5, (1, 2, 3, 4, 5))]
    # with a step and no R: the first window only
    assert windows(spec_of("HEAD~9/HEAD/1", twelve), stream(*range(20)), None) == [
        Window(0, 3, 12, tuple(range(3, 13)))]
    # a dateTime revision alone is the last element at or before it (minute 4.5 -> ordinal 5)
    assert windows(spec_of("2016-06-20T10:04:30Z", TEN), TEN, None) == [Window(0, 5, 5, (5,))]


def test_one_shot_time_range() -> None:
    spec = spec_of("2016-06-20T10:02:00Z/2016-06-20T10:05:00Z", TEN)
    # [2, 5): minutes 2, 3, 4
    assert windows(spec, TEN, m(9)) == [tw(0, 2, 5, 3, 4, 5)]
    assert windows(spec, TEN, m(5) - 1) == []
    # an element end is converted to its timestamp: ordinal 3 is minute 2
    assert windows(spec_of("3/2016-06-20T10:05:00Z", TEN), TEN, m(9)) == [tw(0, 2, 5, 3, 4, 5)]
    assert windows(spec_of("2016-06-20T10:02:00Z/HEAD", TEN), TEN, m(9)) == [tw(0, 2, 9, 3, 4, 5, 6, 7, 8, 9)]


def test_one_shot_prospective() -> None:
    spec = spec_of("HEAD/PT05M", stream(0, 1, 2))  # t0 = minute 2: [2, 7)
    assert windows(spec, TEN, m(6)) == []
    assert not is_complete(spec, 0, TEN, m(7) - 1)
    assert windows(spec, TEN, m(7)) == [tw(0, 2, 7, 3, 4, 5, 6, 7)]  # minute 7 (ordinal 8) excluded
    assert window(spec, 0, stream(0, 1, 2, 3)) == tw(0, 2, 7, 3, 4)  # contents so far, incomplete
    # no R: one window, even with a step
    assert windows(spec_of("HEAD/PT05M/PT01M", stream(0, 1, 2)), TEN, m(9)) == [tw(0, 2, 7, 3, 4, 5, 6, 7)]


def test_time_width_element_step() -> None:
    thirty = stream(*range(30))  # ordinal n at minute n-1
    spec = spec_of("R/HEAD/PT05M/10", stream(0))  # o0 = 1
    assert (spec.anchor, spec.step, spec.step_kind) == (1, 10, "count")
    # window k starts at t(1+10k): t(1)=0, t(11)=10, t(21)=20; element 31 has not arrived
    assert windows(spec, thirty, m(29)) == [
        tw(0, 0, 5, 1, 2, 3, 4, 5),
        tw(1, 10, 15, 11, 12, 13, 14, 15),
        tw(2, 20, 25, 21, 22, 23, 24, 25),
    ]
    assert bounds(spec, 3, thirty) is None
    backward = spec_of("R/HEAD/-PT05M/10", stream(0))
    # window k ends at t(1+10k), k >= 1: (5, 10] -> minutes 6..10, (15, 20] -> minutes 16..20
    assert windows(backward, thirty, m(29)) == [tw(1, 5, 10, 7, 8, 9, 10, 11), tw(2, 15, 20, 17, 18, 19, 20, 21)]


def test_time_width_element_step_with_a_datetime_anchor() -> None:
    # o0 = the first element at or after 10:02 (ordinal 3); windows start at t(3), t(5), t(7), ...
    spec = spec_of("R/2016-06-20T10:02:00Z/PT01M/2", stream(0))
    assert bounds(spec, 0, stream(0, 1)) is None  # no element at or after 10:02 yet
    assert windows(spec, TEN, m(9)) == [tw(0, 2, 3, 3), tw(1, 4, 5, 5), tw(2, 6, 7, 7), tw(3, 8, 9, 9)]


def test_empty_stream_pending_origin() -> None:
    empty = stream()
    spec = spec_of("R/HEAD/PT05M/PT01M", empty)
    # HEAD of an empty stream is its first element, still to come: t0 pending on ordinal 1
    assert spec.pending and (spec.origin, spec.anchor) == (None, 1)
    assert bounds(spec, 0, empty) is None and windows(spec, empty, m(100)) == []
    assert bind_origin(spec, empty) == spec
    later = stream(3, 4, 9)
    bound = bind_origin(spec, later)
    assert (bound.origin, bound.pending) == (m(3), False)
    # [3+k, 8+k); w = 9 completes k = 0, 1
    assert windows(spec, later, m(9)) == windows(bound, later, m(9)) == [tw(0, 3, 8, 1, 2), tw(1, 4, 9, 2)]
    # count windows on an empty stream: HEAD = 1, HEAD~9 = -8, first window [1, 10]
    count = spec_of("R/HEAD~9/HEAD/1", empty)
    assert (count.origin, count.width, count.first) == (-8, 10, 9)
    assert windows(count, stream(*range(11)), None) == [
        Window(9, 1, 10, tuple(range(1, 11))), Window(10, 2, 11, tuple(range(2, 12)))]
    # a one-shot HEAD of an empty stream waits for the first element
    assert windows(spec_of("HEAD", empty), empty, None) == []
    assert windows(spec_of("HEAD", empty), stream(5), None) == [Window(0, 1, 1, (1,))]


def test_completeness_edges() -> None:
    spec = spec_of("R/HEAD/PT05M", stream(0))
    assert not is_complete(spec, 0, TEN, None)  # no watermark: no time window is complete
    assert not is_complete(spec, 0, TEN, m(5) - 1)
    assert is_complete(spec, 0, TEN, m(5))  # w = end: every element before the end has arrived
    # an element exactly at the end of a forward window belongs to the next window
    assert window(spec, 0, TEN) == tw(0, 0, 5, 1, 2, 3, 4, 5)
    assert window(spec, 1, TEN) == tw(1, 5, 10, 6, 7, 8, 9, 10)
    backward = spec_of("R/HEAD/-PT05M", stream(0))  # (5k-5, 5k], k >= 1
    assert window(backward, 1, TEN) == tw(1, 0, 5, 2, 3, 4, 5, 6)  # end inclusive, start exclusive
    assert not is_complete(backward, 1, TEN, m(5) - 1)
    assert is_complete(backward, 1, TEN, m(5))
    count = spec_of("R/HEAD~1/HEAD", stream(0, 1))  # [1, 2], [3, 4], ... tumbling by 2
    assert is_complete(count, 0, stream(0, 1), None)
    assert not is_complete(count, 1, stream(0, 1, 2), m(100))  # a count window ignores the watermark
    assert windows(count, TEN, None) == [Window(k, 2 * k + 1, 2 * k + 2, (2 * k + 1, 2 * k + 2)) for k in range(5)]


def test_unresolvable() -> None:
    known = uuid.UUID("b3e1c2d4-1111-4222-8333-944445555666")
    index = stream(0, 1, 2, uuids={known: 2})
    assert spec_of(f"{known}/PT05M", index).origin == m(1)
    with pytest.raises(WindowNotResolvable) as info:
        spec_of(f"{uuid.UUID(int=7)}/PT05M", index)
    assert info.value.status_hint == 404 and str(uuid.UUID(int=7)) in str(info.value)
    with pytest.raises(WindowNotResolvable) as info:
        spec_of("HEAD~5/PT05M", index)  # ordinal -2
    assert info.value.status_hint == 404 and "HEAD~5" in str(info.value)
    with pytest.raises(WindowNotResolvable) as info:
        spec_of("5/HEAD", index)  # element 5 is after HEAD (3)
    assert info.value.status_hint == 400
    with pytest.raises(WindowNotResolvable) as info:
        spec_of("2016-06-20T10:05:00Z/HEAD", index)  # HEAD is minute 2, before 10:05
    assert info.value.status_hint == 400
    with pytest.raises(WindowNotResolvable):
        spec_of("2016-06-20T09:00:00Z", index)  # no element at or before it
    with pytest.raises(WindowNotResolvable):
        spec_of("HEAD~9/0", index)  # no element at all
    # a future ordinal as anchor is pending, not an error
    assert spec_of("7/PT05M", index).pending


# ---- session windows ------------------------------------------------------------------------------

# ordinals 1..8 at minutes 0, 1, 3, 10, 12, 20, 26, 27: with a 5-minute gap the runs are {0, 1, 3} (1→3: 2 min),
# then 10 (7 after 3), {10, 12}, 20 (8 after 12), 26 (6 after 20), {26, 27}
SESSIONS = stream(0, 1, 3, 10, 12, 20, 26, 27)


def test_session_windows() -> None:
    spec = spec_of("R/1/SESSION/PT05M", SESSIONS)  # t0 = minute 0 (element 1)
    assert (spec.kind, spec.origin, spec.width, spec.first, spec.count) == ("session", m(0), 5 * MIN, 0, None)
    # window k = [its first time, its last time + 5 min); stream time 27: ends 8, 17, 25 are reached, 32 is not
    assert windows(spec, SESSIONS, m(27)) == [tw(0, 0, 8, 1, 2, 3), tw(1, 10, 17, 4, 5), tw(2, 20, 25, 6)]
    assert bounds(spec, 3, SESSIONS) == (m(26), m(32)) and not is_complete(spec, 3, SESSIONS, m(31.9))
    assert is_complete(spec, 3, SESSIONS, m(32)) and window(spec, 3, SESSIONS) == tw(3, 26, 32, 7, 8)
    assert bounds(spec, 4, SESSIONS) is None  # not started


def test_session_gap_edges_and_anchor() -> None:
    # exactly the gap apart is a new window (elements closer than the gap form one): 0 | 5, 9.9 | 15
    index = stream(0, 5, 9.9, 15)
    assert windows(spec_of("R/1/SESSION/PT5M", index), index, m(30)) == [
        tw(0, 0, 5, 1), tw(1, 5, 14.9, 2, 3), tw(2, 15, 20, 4)]
    # elements before t0 are in no window: from element 3 (minute 3), {3} then {10, 12} …
    assert windows(spec_of("R2/3/SESSION/PT5M", SESSIONS), SESSIONS, m(27)) == [tw(0, 3, 8, 3), tw(1, 10, 17, 4, 5)]
    # a one-shot ref is the first window from its anchor: HEAD~4 = element 4, minute 10
    assert windows(spec_of("HEAD~4/SESSION/PT5M", SESSIONS), SESSIONS, m(27)) == [tw(0, 10, 17, 4, 5)]


def test_session_windows_of_an_empty_stream_wait_for_head() -> None:
    spec = spec_of("R/HEAD/SESSION/PT2M", stream())
    assert spec.pending and spec.anchor == 1
    later = stream(4, 5, 9)  # HEAD was the first element to come: t0 = minute 4
    assert windows(spec, later, m(12)) == [tw(0, 4, 7, 1, 2), tw(1, 9, 11, 3)]


def test_session_windows_with_late_elements_join_the_open_window() -> None:
    # lateness: element 3 (minute 4) arrives after element 2 (minute 5); it is not 5 minutes after the latest time
    # before it (5), so it joins window 1, whose bounds are its earliest and latest times: [4, 5 + 5)
    index = stream(0, 5, 4, 11)
    assert windows(spec_of("R/1/SESSION/PT5M", index), index, m(20)) == [
        tw(0, 0, 5, 1), tw(1, 4, 10, 2, 3), tw(2, 11, 16, 4)]


def test_session_element_locates_its_window() -> None:
    spec = spec_of("R/3/SESSION/PT5M", SESSIONS)
    kind = spec.window_kind
    assert kind.locate(0, 1, m(0), SESSIONS) == (0, None)  # before t0
    assert kind.locate(0, 5, m(12), SESSIONS) == (1, tw(1, 10, 17, 4, 5))
    assert kind.locate(1, 7, m(26), SESSIONS) == (3, tw(3, 26, 32, 7, 8))


def test_session_refusals() -> None:
    with pytest.raises(WindowRefSyntaxError, match="a session gap is positive"):
        spec_of("R/HEAD/SESSION/-PT5M", SESSIONS)
    with pytest.raises(WindowNotResolvable, match="'TUMBLE' names no window kind") as refused:
        spec_of("R/HEAD/TUMBLE/PT5M", SESSIONS)
    assert refused.value.status_hint == 400
    with pytest.raises(EventPatternError, match="SESSION windows are not window functions of the evaluation time"):
        event_window_form(parse_window_ref("R/HEAD/SESSION/PT5M"))


# ---- properties ---------------------------------------------------------------------------------

_gaps = st.lists(st.integers(1, 5 * MIN), min_size=0, max_size=25)


def _times(gaps: list[int]) -> list[int]:
    times, now = [], BASE - 10 * MIN
    for gap in gaps:
        now += gap
        times.append(now)
    return times


@settings(max_examples=150, deadline=None)
@given(_gaps, st.integers(1, 10), st.integers(1, 10), st.integers(-10, 10))
def test_complete_forward_windows_hold_exactly_their_elements(
        gaps: list[int], width: int, step: int, anchor_minutes: int) -> None:
    index = ListIndex.of_times(_times(gaps))
    anchor = from_micros(m(anchor_minutes)).isoformat().replace("+00:00", "Z")
    spec = spec_of(f"R/{anchor}/PT{width}M/PT{step}M", index)
    watermark = index.time_of(index.head())
    for found in windows(spec, index, watermark):
        assert found.end - found.start == width * MIN and watermark is not None and watermark >= found.end
        assert found.elements == tuple(o for o in range(1, index.head() + 1)
                                       if found.start <= (index.time_of(o) or 0) < found.end)


@settings(max_examples=150, deadline=None)
@given(_gaps, st.integers(1, 10), st.integers(-10, 10))
def test_tumbling_windows_partition_the_stream(gaps: list[int], width: int, anchor_minutes: int) -> None:
    index = ListIndex.of_times(_times(gaps))
    anchor = from_micros(m(anchor_minutes)).isoformat().replace("+00:00", "Z")
    spec = spec_of(f"R/{anchor}/PT{width}M", index)
    found = windows(spec, index, index.time_of(index.head()))
    if not found:
        return
    covered = [o for o in range(1, index.head() + 1) if m(anchor_minutes) <= (index.time_of(o) or 0) < found[-1].end]
    memberships = [o for w in found for o in w.elements]
    assert sorted(memberships) == covered  # each covered element in exactly one window
    assert all(a.end == b.start for a, b in zip(found, found[1:], strict=False))
