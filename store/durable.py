"""Writing files so that they survive a crash, and the commit clock: the few primitives every store file uses."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def now_micros() -> int:
    """The commit clock: µs since the epoch (what commit times, and receipt times of unstamped elements, are)."""
    return time.time_ns() // 1_000


def fsync_file(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically and durably."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_bytes(data)
    fsync_file(temporary)
    os.replace(temporary, path)


def write_json(path: Path, data: object) -> None:
    """Replace ``path`` atomically and durably."""
    write_bytes(path, json.dumps(data, indent=1).encode())


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` in one write and fsync it: a crash can only leave a torn end of ``data``."""
    with path.open("ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
