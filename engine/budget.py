"""A query's budget: the time it may take from its request's start (``--query-timeout``, or less with the request's
``timeout=``), and the server's query flags (``QueryLimits``)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import (
    QueryBudgetExceeded,
)

DEFAULT_TIMEOUT = 60.0  # seconds: --query-timeout
DEFAULT_PROCESSES = max(2, 2 * (os.cpu_count() or 1))  # --query-processes
DEFAULT_PER_CLIENT = 4  # --queries-per-client
DEFAULT_QUEUE = 64  # --query-queue
POLL_SECONDS = 0.05  # how often a waiting request looks at its deadline and its client's connection
WORKER_GRACE = 5.0  # a worker whose parent failed to kill it ends itself this long after its deadline
NICE = 10


def in_flight_bound(threads: int) -> int:
    """Queries admitted at once (running or waiting) for a server of ``threads`` request threads: each holds a thread
    while it lasts, so a quarter of them (at least 2) is kept for everything else (``/status``, uploads, writes).

    >>> in_flight_bound(16), in_flight_bound(4), in_flight_bound(40)
    (12, 2, 30)
    """
    return max(1, threads - max(2, threads // 4))



# --- budgets ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """The time a query may take, from its request's start: the server's ``--query-timeout``, or the request's
    ``timeout=`` (``given``, as sent) when lower."""

    seconds: float
    server_seconds: float
    deadline: float  # time.monotonic()
    given: str | None = None

    @classmethod
    def start(cls, server_seconds: float, requested: float | None = None, given: str | None = None) -> Budget:
        seconds = server_seconds if requested is None else min(requested, server_seconds)
        return cls(seconds, server_seconds, time.monotonic() + seconds, given)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def exceeded(self, *, waiting: bool = False) -> QueryBudgetExceeded:
        """The error of a query stopped at its deadline (``waiting``: before a worker was free to run it)."""
        if self.given is None:
            source = "the server's --query-timeout"
        elif self.seconds < self.server_seconds:
            source = f"timeout={self.given}; the server's --query-timeout is {self.server_seconds:g} s"
        else:
            source = f"timeout={self.given}, capped to the server's --query-timeout"
        what = ("waited for a free query process past its budget" if waiting else "ran past its budget")
        return QueryBudgetExceeded(
            f"the query {what} of {self.seconds:g} s ({source}) and was stopped",
            headers={"Retry-After": str(max(1, math.ceil(self.seconds)))})

    def stop_when(self, gone: Callable[[], bool]) -> Callable[[], bool]:
        """A ``stop`` for ``engine.plain.write`` (asked while a result is written in this process): raises
        ``exceeded()`` past the deadline, else says whether the client is ``gone``."""
        def stop() -> bool:
            if self.expired():
                raise self.exceeded()
            return gone()

        return stop


@dataclass(frozen=True)
class QueryLimits:
    """``concentrator serve``'s query flags. ``processes`` 0: no workers, every query is evaluated in the request's
    thread (then only the writing of its result can be stopped); ``in_flight``: queries admitted at once (running or
    waiting), None: no bound but the others."""

    timeout: float = DEFAULT_TIMEOUT
    processes: int = 0
    per_client: int = DEFAULT_PER_CLIENT
    queue: int = DEFAULT_QUEUE
    in_flight: int | None = None
