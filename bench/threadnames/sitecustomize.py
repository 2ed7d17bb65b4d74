"""Thread names for CPU accounting: loaded by the server that a benchmark starts, never by the server itself.

Python 3.11 does not give its threads' names to the OS (``/proc/<pid>/task/<tid>/comm`` says ``python`` for all
of them), so a benchmark cannot tell the committer thread (``commit-<stream>``) from a request thread by
``/proc`` alone. A benchmark that wants to puts this directory first on the server's ``PYTHONPATH`` and sets
``BENCH_THREAD_NAMES`` to a directory: Python imports this module at start-up (``sitecustomize``), and every
thread started from then on (in every process with that environment, forked ones included) appends one line to
``$BENCH_THREAD_NAMES/<pid>.tsv`` before it runs::

    <native thread id> TAB <thread name> TAB <module.class of the thread object> TAB <target's module.qualname>

Costs one short file append per thread start. Without ``BENCH_THREAD_NAMES`` it does nothing.
"""

from __future__ import annotations

import os
import threading

_DIRECTORY = os.environ.get("BENCH_THREAD_NAMES")


def _describe(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    target_name = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}" if target else ""
    kind = f"{type(thread).__module__}.{type(thread).__qualname__}"
    return "\t".join(part.replace("\t", " ").replace("\n", " ") for part in (thread.name, kind, target_name))


if _DIRECTORY:
    _bootstrap_inner = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def _record_then_run(self: threading.Thread) -> None:
        try:
            with open(os.path.join(_DIRECTORY, f"{os.getpid()}.tsv"), "a", encoding="utf-8") as names:
                names.write(f"{threading.get_native_id()}\t{_describe(self)}\n")
        except OSError:
            pass  # accounting is best effort: the thread runs regardless
        _bootstrap_inner(self)

    threading.Thread._bootstrap_inner = _record_then_run  # type: ignore[attr-defined]
