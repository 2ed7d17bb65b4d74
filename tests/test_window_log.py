"""Window sequences keyed by the ref *and* what it resolved to (issue 12, item 3): ``HEAD`` is the HEAD when a
request or rule registers, so the same text registered at two HEADs is two sequences; registrations that resolve
alike share one. Sequences nobody holds or uses are retired after a grace period. No Spark here."""

from __future__ import annotations

from pathlib import Path

from sparql_ext.windowing import ListIndex, resolve
from sparql_ext.windowref import parse_window_ref
from store.windows import WindowLog

SECOND = 1_000_000


def spec_at(ref: str, times: list[int]):  # type: ignore[no-untyped-def]
    return resolve(parse_window_ref(ref), ListIndex.of_times(times))


def test_head_refs_registered_at_two_heads_are_two_sequences(tmp_path: Path) -> None:
    log = WindowLog(tmp_path)
    early, new_early = log.register("R3/HEAD/PT1S", spec_at("R3/HEAD/PT1S", [0]))
    again, new_again = log.register("R3/HEAD/PT1S", spec_at("R3/HEAD/PT1S", [0]))  # same HEAD: shared
    later, new_later = log.register("R3/HEAD/PT1S", spec_at("R3/HEAD/PT1S", [0, SECOND, 2 * SECOND]))
    assert new_early and not new_again and new_later
    assert again.id == early.id and later.id != early.id
    assert (early.spec.origin, later.spec.origin) == (0, 2 * SECOND)  # t0 = t(HEAD) at each registration
    assert [s.id for s in log.with_ref("R3/HEAD/PT1S")] == [early.id, later.id]
    assert log.find("R3/HEAD/PT1S", spec_at("R3/HEAD/PT1S", [0])) == early


def test_a_datetime_anchored_ref_is_one_sequence_whatever_the_head(tmp_path: Path) -> None:
    log = WindowLog(tmp_path)
    ref = "R/2016-06-20T10:00:00Z/PT5M"
    one, _ = log.register(ref, spec_at(ref, [0]))
    two, new = log.register(ref, spec_at(ref, [0, SECOND]))
    assert two.id == one.id and not new


def test_an_empty_streams_head_is_its_first_element_for_everyone(tmp_path: Path) -> None:
    log = WindowLog(tmp_path)
    one, _ = log.register("R/HEAD/PT1M", spec_at("R/HEAD/PT1M", []))
    two, new = log.register("R/HEAD/PT1M", spec_at("R/HEAD/PT1M", []))
    assert two.id == one.id and not new and one.spec.anchor == 1 and one.spec.origin is None


def test_unheld_idle_sequences_retire_and_come_back_under_a_new_id(tmp_path: Path) -> None:
    log = WindowLog(tmp_path)
    held, _ = log.register("R/HEAD/PT1S", spec_at("R/HEAD/PT1S", [0]))
    idle, _ = log.register("R/HEAD/PT2S", spec_at("R/HEAD/PT2S", [0]))
    log.hold(held.id)
    assert log.retire_idle(grace=3600) == []  # used a moment ago
    assert log.retire_idle(grace=0) == [idle.id]
    assert [s.id for s in log.sequences()] == [held.id] and log.retired(idle.id)
    log.release(held.id)
    assert log.retire_idle(grace=0) == [held.id]
    back, new = log.register("R/HEAD/PT2S", spec_at("R/HEAD/PT2S", [0]))
    assert new and back.id != idle.id  # a retired id is never given again
    reopened = WindowLog(tmp_path)
    assert [s.id for s in reopened.sequences()] == [back.id] and reopened.retired(idle.id)
