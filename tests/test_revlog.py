from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from sparql_ext import Head, Instant, Ordinal, RevisionId
from store import RevisionLog, RevisionNotFound
from store.revlog import Revision

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _log() -> RevisionLog:
    log = RevisionLog()
    for minutes in (0, 10, 20):
        log.append(log.next_revision("put", 1, 0, T0 + timedelta(minutes=minutes)))
    return log


def test_head_and_offsets() -> None:
    log = _log()
    assert log.resolve(Head(0), "HEAD") == 3
    assert log.resolve(Head(1), "HEAD~1") == 2
    assert log.resolve(Head(3), "HEAD~3") == 0  # the empty initial state
    with pytest.raises(RevisionNotFound, match="HEAD~4"):
        log.resolve(Head(4), "HEAD~4")


def test_ordinal_and_uuid() -> None:
    log = _log()
    assert log.resolve(Ordinal(2), "2") == 2
    with pytest.raises(RevisionNotFound, match="'9'"):
        log.resolve(Ordinal(9), "9")
    second = log.get(2)
    assert second is not None
    assert log.resolve(RevisionId(second.uuid), str(second.uuid)) == 2
    with pytest.raises(RevisionNotFound):
        log.resolve(RevisionId(uuid.uuid4()), "x")


def test_instant_is_last_revision_at_or_before() -> None:
    log = _log()  # commits at 12:00, 12:10, 12:20
    assert log.resolve(Instant(T0 - timedelta(seconds=1)), "t") == 0
    assert log.resolve(Instant(T0), "t") == 1
    assert log.resolve(Instant(T0 + timedelta(minutes=15)), "t") == 2
    assert log.resolve(Instant(T0 + timedelta(minutes=20)), "t") == 3
    assert log.resolve(Instant(T0 + timedelta(days=1)), "t") == 3


def test_commit_times_strictly_increase_even_if_the_clock_does_not() -> None:
    log = RevisionLog()
    first = log.next_revision("put", 1, 0, T0)
    log.append(first)
    second = log.next_revision("put", 1, 0, T0 - timedelta(hours=1))
    assert second.committed_at > first.committed_at


def test_json_round_trip() -> None:
    revision = _log().get(1)
    assert revision is not None
    assert Revision.from_json(revision.to_json()) == revision
