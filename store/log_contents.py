"""Element contents as another process reads them: byte runs of the element log's content files (``ContentRun``,
made by ``Stream.content_runs``), read in one go each (``read_runs``). A rule task in a Spark executor reads its
windows so (``rules.tasks``); this module imports nothing but ``os``, so that reading costs an executor no import.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple


class ContentRun(NamedTuple):
    """Contents of neighbouring elements: a content file of the log and a byte range in it."""

    path: str
    offset: int
    length: int


def read_runs(runs: Iterable[ContentRun]) -> bytes:
    """The contents at ``runs``, concatenated in order: one read per run. Raises ``OSError`` when a run is gone or
    shorter than its length (e.g. its segment expired meanwhile)."""
    pieces = []
    for path, offset, length in runs:
        with open(path, "rb") as content:
            piece = os.pread(content.fileno(), length, offset)
        if len(piece) != length:
            raise OSError(f"{path}: {length} bytes expected at {offset}, {len(piece)} read")
        pieces.append(piece)
    return b"".join(pieces)
