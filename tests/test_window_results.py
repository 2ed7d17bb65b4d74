"""protocol.window_results: one computation per key, however many ask at once."""

from __future__ import annotations

import threading
import time

import pytest

from delivery.results import SharedResults


def test_concurrent_requests_compute_once_and_share() -> None:
    shared: SharedResults[int] = SharedResults(capacity=2)
    calls = []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.2)
        return 42

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(shared.get("w1", slow))) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [42] * 20 and len(calls) == 1
    assert shared.status() == {"computed": 1, "shared": 19, "entries": 1}
    shared.get("w2", lambda: 2)
    shared.get("w3", lambda: 3)  # capacity 2: w1 is the least recently used and goes
    assert shared.get("w1", lambda: 7) == 7


def test_a_failed_computation_is_not_kept() -> None:
    shared: SharedResults[int] = SharedResults()

    def fail() -> int:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        shared.get("k", fail)
    assert shared.get("k", lambda: 1) == 1
