"""The catalog of streams of one server: names, directories, and IRIs that alias them."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

from store.errors import InvalidStreamName, StreamConflict, StreamNotFound
from store.ldes import check_pages
from store.migrate import migrate_stream
from store.stream import Stream
from store.stream_config import StreamConfig

log = logging.getLogger(__name__)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_stream_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidStreamName(
            f"{name!r} is not a stream name: use 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


class StreamCatalog:
    """Streams under ``<data>/streams/``; opened at start-up, created by ``PUT /streams/{name}``."""

    def __init__(self, directory: Path, *, in_memory: bool = False) -> None:
        self.directory = directory
        self._in_memory = in_memory
        self._lock = threading.Lock()
        self._streams: dict[str, Stream] = {}
        directory.mkdir(parents=True, exist_ok=True)
        for child in sorted(directory.iterdir()):
            if (child / "config.json").exists():
                migrate_stream(child, directory.parent / "spark")  # an earlier version's layout, once
                self._streams[child.name] = Stream.open(child, in_memory=in_memory)
        self._aliases = self._alias_index()  # alias -> stream name (a rule firing looks up every sensor's stream)
        # called after a stream is created or reconfigured (new aliases): rules re-discover their inputs
        self.on_change: list[Callable[[Stream], None]] = []
        self.on_delete: list[Callable[[str], None]] = []  # called with the name, before the stream is removed
        # called with each configuration ``put`` is given, before anything changes: each raises the error of a setting
        # its part cannot take (the store's LDES pages here; the composition root adds the connectors' checks)
        self.checks: list[Callable[[StreamConfig], None]] = [check_pages]

    def names(self) -> list[str]:
        return sorted(self._streams)

    def get(self, name: str) -> Stream:
        stream = self._streams.get(name)
        if stream is None:
            raise StreamNotFound(f"no stream named {name!r}: create it with PUT /streams/{name}")
        return stream

    def find(self, name: str) -> Stream | None:
        return self._streams.get(name)

    def by_alias(self, iri: str) -> Stream | None:
        """The stream an IRI such as ``urn:uuid:…`` was mapped to."""
        name = self._aliases.get(iri)
        return None if name is None else self._streams.get(name)

    def _alias_index(self) -> dict[str, str]:
        return {alias: stream.config.name for stream in self._streams.values() for alias in stream.config.aliases}

    def put(self, config: StreamConfig) -> tuple[Stream, bool]:
        """Create or reconfigure (once every check has taken ``config``); returns the stream and whether it was
        created."""
        check_stream_name(config.name)
        for check in self.checks:
            check(config)
        with self._lock:
            taken = sorted(alias for alias in config.aliases if self._aliases.get(alias, config.name) != config.name)
            if taken:
                raise StreamConflict(f"alias {taken[0]} already names stream {self._aliases[taken[0]]!r}")
            stream = self._streams.get(config.name)
            created = stream is None
            if stream is not None:
                stream.reconfigure(config)
            else:
                stream = Stream.create(self.directory / config.name, config, in_memory=self._in_memory)
                self._streams[config.name] = stream
            self._aliases = self._alias_index()
        for listener in self.on_change:
            try:
                listener(stream)
            except Exception:  # noqa: BLE001 - the stream stands; a listener's failure is its own
                log.exception("on_change listener failed for stream %s", config.name)
        return stream, created

    def delete(self, name: str) -> None:
        with self._lock:
            stream = self.get(name)
            del self._streams[name]
            self._aliases = self._alias_index()
        for listener in self.on_delete:
            try:
                listener(name)
            except Exception:  # noqa: BLE001 - the deletion goes on; a listener's failure is its own
                log.exception("on_delete listener failed for stream %s", name)
        stream.remove()

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close()
