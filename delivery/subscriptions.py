"""The subscriptions running now: one ``Registration`` per continuous response, whichever thread or event loop
serves it (``/status``: ``continuous`` lists them, ``subscribers`` counts them per sequence)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Registration:
    """One running continuous response (shown in /status)."""

    id: str
    stream: str
    ref: str
    packaging: str
    media_type: str
    client: str
    started: str
    windows_sent: int = 0
    last_window: int | None = None
    sequence: str = ""

    def delivered(self, index: int, part: bytes) -> bytes:
        """Count a window's part as sent (for /status) and pass it on."""
        self.windows_sent += 1
        self.last_window = index
        return part

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "stream": self.stream, "ref": self.ref, "packaging": self.packaging,
                "media_type": self.media_type, "client": self.client, "started": self.started,
                "windows_sent": self.windows_sent, "last_window": self.last_window, "sequence": self.sequence}


@dataclass
class Registrations:
    """The continuous responses running now, and how many ended since the server started."""

    _items: dict[str, Registration] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    ended: int = 0

    def add(self, registration: Registration) -> None:
        with self._lock:
            self._items[registration.id] = registration

    def remove(self, ident: str) -> None:
        with self._lock:
            if self._items.pop(ident, None) is not None:
                self.ended += 1

    def __len__(self) -> int:
        return len(self._items)

    def status(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The registrations, oldest first; with ``limit``, the newest ``limit`` of them."""
        with self._lock:
            items = list(self._items.values())
        if limit is not None:
            items = items[-limit:] if limit else []
        return [r.to_json() for r in items]

    def per_sequence(self) -> dict[str, dict[str, Any]]:
        """Subscribers per window sequence: ``{sequence id: {"stream": …, "subscribers": n}}``."""
        with self._lock:
            counts = Counter((r.stream, r.sequence) for r in self._items.values())
        return {sequence: {"stream": stream, "subscribers": n} for (stream, sequence), n in sorted(counts.items())}
