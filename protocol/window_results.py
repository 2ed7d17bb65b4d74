"""Window results shared between continuous responses: a window's answer to a query is computed once, however
many subscribers ask for it (bench/continuous: 100 subscribers evaluating the same query on every window
took the server's CPU and slowed ingestion; shared, the window costs one evaluation)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedResults(Generic[T]):
    """An LRU of computed values by key; concurrent requests for a key being computed wait for it."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._values: OrderedDict[Hashable, T] = OrderedDict()
        self._pending: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()
        self.computed = 0
        self.shared = 0

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        while True:
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    self.shared += 1
                    return self._values[key]
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = threading.Event()
                    break
            pending.wait()  # another response computes it; then it is in _values (or failed: compute here)
        try:
            value = compute()
            with self._lock:
                self.computed += 1
                self._values[key] = value
                while len(self._values) > self.capacity:
                    self._values.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._pending[key]
            pending.set()

    def status(self) -> dict[str, int]:
        with self._lock:
            return {"computed": self.computed, "shared": self.shared, "entries": len(self._values)}
