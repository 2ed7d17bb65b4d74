"""bench/subscribers.py's pure parts (issue 31): the SSE parser, the per-subscriber window check, fan-out per window,
the windows an upload completes, the bodies it sends, and its plots drawn from a small document. The benchmark itself
(a server and 11,000 connections) is run by hand: bench/README.md."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from pyoxigraph import DefaultGraph, RdfFormat, parse

import bench.harness as harness
import bench.subscribers as subscribers
from bench.subscribers import (
    QUERY,
    T0,
    EventStream,
    Plan,
    check_windows,
    element_batches,
    fanout,
    last_complete_index,
    seed_times,
    subscriber_target,
    summary,
)


def test_doctests() -> None:
    assert doctest.testmod(subscribers).failed == 0


def test_event_stream_cut_anywhere_gives_the_same_events() -> None:
    body = (b": window results follow\n\nevent: window\nid: 0\ndata: n\ndata: 7\n\n: keep-alive\n\n"
            b"event: window\nid: 1\ndata: n\ndata: 9\n\nevent: end\ndata: bye\n\n")
    whole = EventStream()
    expected = whole.feed(body)
    assert expected == [("window", "0", "n\n7"), ("window", "1", "n\n9"), ("end", "", "bye")]
    assert whole.comments == 2
    for cut in range(1, len(body)):
        parser = EventStream()
        assert parser.feed(body[:cut]) + parser.feed(body[cut:]) == expected, cut
        assert parser.comments == 2


def test_window_check_from_window_from() -> None:
    listed = [0, 1, 2, 3, 4]
    assert check_windows([2, 3, 4], listed, 2)["complete"]
    late_start = check_windows([3, 4], listed, 2)  # Window-From said 2: window 2 is missing
    assert not late_start["complete"] and late_start["missing_sample"] == [2]
    stopped = check_windows([0, 1, 2], listed, 0)  # ended before the last listed window
    assert not stopped["complete"] and stopped["missing"] == 2
    skipped = check_windows([0, 1, 3], [0, 1, 3], 0)  # the server skipped index 2 (an empty stretch): fine
    assert skipped["complete"]
    assert check_windows([0, 1, 2, 3], [0, 1, 2], 0)["beyond_listed"] == 1


def test_fanout_per_window() -> None:
    commits = {(0, 0): 100.0, (0, 1): 101.0, (1, 0): 100.5}
    receipts = {(0, 0): [100.010, 100.030], (0, 1): [101.2], (1, 0): [100.6, 100.7, 100.8]}
    rows = {(w.sequence, w.index): w for w in fanout(commits, receipts, {0: 2, 1: 3})}
    assert rows[(0, 0)].complete and rows[(0, 0)].first_ms == pytest.approx(10.0, abs=0.01)
    assert rows[(0, 0)].last_ms == pytest.approx(30.0, abs=0.01)
    assert not rows[(0, 1)].complete  # one of its two subscribers did not get it
    assert rows[(1, 0)].last_ms == pytest.approx(300.0, abs=0.01)
    assert fanout({(2, 0): 1.0}, {}, {2: 1})[0].last_ms is None


def test_summary_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    result = summary(values)
    assert result["n"] == 100 and result["max_ms"] == 100.0 and result["p99_ms"] == 99.0


def test_windows_an_upload_completes() -> None:
    width = 1_000_000
    plan = Plan(sequences=4, width_us=width, spacing_us=500, elements=10_000, rate=2000.0)
    assert seed_times(4, width) == [T0, T0 + 250_000, T0 + 500_000, T0 + 750_000]
    # stream time after 10,000 elements: T0 + 1 s + 9,999 × 0.5 ms = T0 + 5.9995 s
    assert plan.last_indexes(10_000) == [4, 4, 4, 4]
    assert plan.last_indexes(10_001) == [5, 4, 4, 4]  # T0 + 6 s ends window 5 of the first sequence
    assert last_complete_index(T0, width, T0 + 999_999) == -1


def test_bodies_are_n_quads_with_their_timestamps_in_the_default_graph() -> None:
    batches = element_batches("s", 5, T0 + 1_000_000, 500, 2)
    assert len(batches) == 3
    quads = list(parse(b"".join(batches), format=RdfFormat.N_QUADS))
    stamps = [q for q in quads if q.graph_name == DefaultGraph()]
    assert [q.object.value for q in stamps] == ["2016-06-20T10:00:01.000000Z", "2016-06-20T10:00:01.000500Z",
                                                "2016-06-20T10:00:01.001000Z", "2016-06-20T10:00:01.001500Z",
                                                "2016-06-20T10:00:01.002000Z"]
    assert {str(q.subject) for q in stamps} == {str(q.graph_name) for q in quads if q.graph_name != DefaultGraph()}


def test_subscriber_target_keeps_the_ref_and_the_query() -> None:
    target = subscriber_target("subscribed", "R/HEAD/PT01S", "abc123")
    parts = urlsplit(target)
    params = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert parts.path == "/streams/subscribed"
    assert params == {"WINDOWS": "R/HEAD/PT01S", "sequence": "abc123", "format": "text/csv", "query": QUERY}
    assert " " not in target


def _document() -> dict[str, object]:
    origin = 1_800_000_000.0
    windows = [[j % 2, j // 2, origin + 30 + j * 0.5, 4, 4, 5.0 + j, 20.0 + 2 * j] for j in range(20)]
    status = [[10 + i * 0.1, "baseline upload" if i < 50 else "held", 5.0 + i % 7, 200, 0 if i < 50 else 8]
              for i in range(100)]
    return {"origin_epoch": origin, "phases": {"baseline upload": [10.0, 15.0], "held": [15.0, 20.0]},
            "settings": {"sequences": 2, "window": "R/HEAD/PT01S"},
            "subscribers": {"attached": {"sse": 6, "ws": 2}},
            "memory": {"series": [[t, "x", 1000.0 + t, 200.0, 600.0] for t in range(40)]},
            "status_ms": {"series": status}, "per_window": windows}


def test_plots_from_a_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    (tmp_path / "subscribers_test.json").write_text(json.dumps(_document()), encoding="utf-8")
    drawn = harness.replot(subscribers.plots, "subscribers_test")
    assert [p.name for p in drawn] == ["subscribers_test.png", "subscribers_test_latency.png"]
    for path in drawn:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
