"""A small Python client: upload a generator of elements, iterate a continuous response (docs/continuous.md).

>>> from concentrator.client import upload, windows          # doctest: +SKIP
>>> upload("http://127.0.0.1:8080/streams/hr", trig_elements())  # one chunked request, committed as it goes
>>> for window in windows("http://127.0.0.1:8080/streams/hr", "R3/HEAD/PT1M", query="SELECT …"):
...     print(window.index, window.start, window.end, window.body)

With ``resume=True`` both survive a dropped connection or a server restart: ``windows`` reconnects with
``after=`` the last window received, ``upload`` re-sends only the items the stream's HEAD does not hold yet.

Only ``requests``: a continuous response is read as ``multipart/mixed`` (each window a part with its own
headers), so window boundaries and bounds survive any proxy that re-chunks the response.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any

import requests


@dataclass(frozen=True)
class Window:
    """One window of a continuous response."""

    index: int
    id: str
    start: str
    end: str
    committed: str
    media_type: str
    body: bytes

    def json(self) -> Any:
        import json

        return json.loads(self.body)


class ClientError(RuntimeError):
    """The server refused a request; the message is its answer."""


# What a dropped connection or a restarting server looks like to requests (refused, reset, cut mid-body).
DROPPED = (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)


@dataclass
class Backoff:
    """Waits between reconnection attempts: 0.25 s doubling up to ``ceiling``; gives up once ``give_up`` seconds
    have passed since the connection was lost (``reset`` when it works again)."""

    give_up: float
    ceiling: float = 5.0
    _delay: float = 0.25
    _since: float | None = None

    def wait(self, error: Exception) -> None:
        now = time.monotonic()
        self._since = now if self._since is None else self._since
        if now - self._since > self.give_up:
            raise ClientError(f"the server did not answer again within {self.give_up:g} s: {error}") from error
        time.sleep(self._delay)
        self._delay = min(self._delay * 2, self.ceiling)

    def reset(self) -> None:
        self._delay, self._since = 0.25, None


def upload(url: str, elements: Iterable[str | bytes], content_type: str = "application/trig",
           session: requests.Session | None = None, timeout: float | None = None, resume: bool = False,
           give_up: float = 120.0) -> dict[str, Any]:
    """Send ``elements`` (TriG / N-Quads text, an element or several per item) as one chunked upload; each
    element is committed as it arrives. Returns the server's answer (committed count, ordinals, stream time).

    ``resume=True``: a dropped connection (or a server that went away and comes back within ``give_up`` seconds)
    does not end the upload. The client reads how far the stream got (its HEAD ordinal) and sends again only the
    items after the last committed one. For that, each item must be **exactly one element** with a named graph
    (not punctuation), and nobody else may write to the stream meanwhile (one uploader per stream); the items
    sent since the upload (re)started are kept in memory until the server answers."""
    http = session or requests.Session()
    if not resume:
        return _post(http, url, (_bytes(item) for item in elements), content_type, timeout)
    backoff = Backoff(give_up)
    first = before = _settled_head(http, url, backoff, settle=False)[0]
    pending: list[bytes] = []  # items sent, or being sent, whose commit the server has not confirmed
    source = iter(elements)
    while True:
        try:
            answer = _post(http, url, _replay(pending, source), content_type, timeout)
        except DROPPED as error:
            backoff.wait(error)
            head, graph = _settled_head(http, url, backoff)
            _drop_committed(pending, head - before, graph)
            before = head
            continue
        committed = answer["head"] - first  # one uploader: every element after the first HEAD is ours
        return {**answer, "committed": committed, "first_ordinal": first + 1 if committed else None,
                "last_ordinal": answer["head"] if committed else None}


def _bytes(item: str | bytes) -> bytes:
    return item.encode("utf-8") if isinstance(item, str) else item


def _post(http: requests.Session, url: str, body: Iterable[bytes], content_type: str,
          timeout: float | None) -> dict[str, Any]:
    response = http.post(url, data=body, headers={"Content-Type": content_type}, timeout=timeout)
    if not response.ok:
        raise ClientError(f"{response.status_code}: {response.text.strip()}")
    return response.json()  # type: ignore[no-any-return]


def _replay(pending: list[bytes], source: Iterator[str | bytes]) -> Iterator[bytes]:
    """The items not known to be committed, then new ones from ``source`` (remembered in ``pending``)."""
    yield from list(pending)
    for item in source:
        pending.append(_bytes(item))
        yield pending[-1]


def _drop_committed(pending: list[bytes], committed: int, graph: str | None) -> None:
    """Forget the ``committed`` first pending items, checking that the last of them is the stream's HEAD element
    (else the items are not one element each, or someone else wrote to the stream: resuming would be a guess)."""
    if committed == 0:
        return
    needle = graph if graph is None or graph.startswith(("<", "_:")) else f"<{graph}>"  # N-Triples form
    if not 0 < committed <= len(pending) or needle is None or needle.encode() not in pending[committed - 1]:
        raise ClientError(f"cannot resume the upload: the stream's HEAD moved by {committed} element(s) (HEAD graph "
                          f"{graph}) but {len(pending)} item(s) were in flight and the item matching it is not "
                          "the last committed one; resume=True needs one element per item and one uploader")
    del pending[:committed]


def _settled_head(http: requests.Session, url: str, backoff: Backoff, settle: bool = True) -> tuple[int, str | None]:
    """The stream's HEAD (ordinal, graph name) once it stops moving: after a dropped upload a live server may still
    be committing what it had received, so HEAD is read until two reads half a second apart agree."""
    previous: tuple[int, str | None] | None = None
    while True:
        try:
            response = http.get(url, headers={"Accept": "application/json"}, timeout=30)
        except DROPPED as error:
            backoff.wait(error)
            continue
        if response.status_code >= 500:
            backoff.wait(ClientError(f"{response.status_code}: {response.text.strip()}"))
            continue
        if not response.ok:
            raise ClientError(f"{response.status_code}: {response.text.strip()}")
        head = response.json()["head"]
        current = (0, None) if head is None else (int(head["ordinal"]), str(head["graph"]))
        if current == previous or not settle:
            backoff.reset()
            return current
        previous = current
        time.sleep(0.5)


def windows(url: str, window_ref: str, query: str | None = None, format: str | None = None,  # noqa: A002
            report: str | None = None, operator: str | None = None,
            session: requests.Session | None = None, resume: bool = False, give_up: float = 120.0,
            ) -> Iterator[Window]:
    """Iterate the windows of a continuous response on ``url?WINDOWS=window_ref`` (``R…``) as they complete.
    Ends when the response ends (``Rn``); closing the iterator disconnects. Raises ClientError when the server
    refuses (4xx, 5xx: its answer) or answers something other than a continuous response (a one-shot ref);
    without ``resume``, a server that cannot be reached raises requests' ``ConnectionError``.

    ``resume=True``: a dropped connection, or a server that restarts within ``give_up`` seconds, does not end the
    iteration: the client reconnects (backing off from 0.25 s to 5 s) with ``after=`` the last window it received
    (``from=`` where the first response started if none), so every window is seen exactly once, in order, with
    the parts an uninterrupted response would have sent (IStream / DStream included). Not with ``report=``
    ``content-change`` or ``periodic:`` (the server refuses to resume those: ClientError)."""
    http = session or requests.Session()
    params = {"WINDOWS": window_ref, "packaging": "multipart"}
    for key, value in (("query", query), ("format", format), ("report", report), ("operator", operator)):
        if value is not None:
            params[key] = value
    if not resume:
        try:
            yield from _windows_once(http, url, params, _Position())
        except _Truncated:
            pass  # the response was cut: without resume, the iteration just ends
        except _Unavailable as error:
            raise ClientError(str(error)) from None  # without resume, a 5xx is the server's answer like a 4xx
        return
    position, backoff = _Position(), Backoff(give_up)
    while True:
        try:
            for window in _windows_once(http, url, {**params, **position.params()}, position):
                backoff.reset()
                yield window
            if position.notice is not None:  # ended by the server (too far behind): resuming would be refused
                raise ClientError(position.notice)
            return
        except (*DROPPED, _Truncated, _Unavailable) as error:
            backoff.wait(error)


@dataclass
class _Position:
    """How far a continuous response got: what to ask for when reconnecting."""

    sequence: str | None = None
    start: int | None = None  # the first response's Window-From
    last: int | None = None  # the last window received
    notice: str | None = None  # the server's closing remark, when it ended the response itself

    def params(self) -> dict[str, str]:
        resume = {"after": str(self.last)} if self.last is not None else \
            {"from": str(self.start)} if self.start is not None else {}
        return {**resume, **({"sequence": self.sequence} if self.sequence else {})}

    def opened(self, headers: Any) -> None:
        self.sequence = headers.get("Window-Sequence", self.sequence)
        if self.start is None and "Window-From" in headers:
            self.start = int(headers["Window-From"])


class _Truncated(Exception):
    """The response ended without its closing delimiter: the connection was cut."""


class _Unavailable(Exception):
    """A 5xx answer: the server is there but not ready (e.g. still starting)."""


def _windows_once(http: requests.Session, url: str, params: dict[str, str], position: _Position) -> Iterator[Window]:
    with http.get(url, params=params, stream=True, timeout=(30, None)) as response:
        if response.status_code >= 500:
            raise _Unavailable(f"{response.status_code}: {response.text.strip()}")
        if not response.ok:
            raise ClientError(f"{response.status_code}: {response.text.strip()}")
        if response.status_code == 204:
            return  # resumed past the last window of an Rn ref: nothing was left
        boundary = _multipart_boundary(response, params["WINDOWS"])
        position.opened(response.headers)
        for headers, body in _parts(response.iter_content(chunk_size=None), boundary.encode()):
            if "Window-Index" not in headers:
                position.notice = body.decode("utf-8", errors="replace").strip()
                continue  # the server's closing notice (e.g. a client too far behind)
            window = Window(int(headers["Window-Index"]), headers.get("Window-Id", ""),
                            headers.get("Window-Start", ""), headers.get("Window-End", ""),
                            headers.get("Window-Committed", ""), headers.get("Content-Type", ""), body)
            position.last = window.index
            yield window


def _multipart_boundary(response: requests.Response, window_ref: str) -> str:
    """The boundary of a continuous response; any other answer (a one-shot ref's single window) is refused."""
    content_type = response.headers.get("Content-Type", "")
    header = Message()
    header["Content-Type"] = content_type
    boundary = header.get_param("boundary")
    if header.get_content_type() == "multipart/mixed" and isinstance(boundary, str) and boundary:
        return boundary
    url = response.url.split("?", 1)[0]
    why = (f"it needs a repeating WindowRef (R/…), and {window_ref!r} is one window"
           if not window_ref.lstrip().startswith("R") else "is there a proxy in between?")
    raise ClientError(f"{url} answered {content_type or 'without a Content-Type'}, not a continuous response "
                      f"(multipart/mixed): {why}")


def _parts(chunks: Iterable[bytes], boundary: bytes) -> Iterator[tuple[dict[str, str], bytes]]:
    """The parts of a multipart/mixed body read incrementally (RFC 2046: ``--boundary`` lines)."""
    delimiter = b"--" + boundary
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while True:
            start = buffer.find(delimiter)
            if start < 0:
                break
            after = start + len(delimiter)
            if buffer[after:after + 2] == b"--":
                return  # the closing delimiter
            end = buffer.find(b"\r\n" + delimiter, after)
            if end < 0:
                break  # the part is not complete yet
            head, _, body = buffer[after:end].lstrip(b"\r\n").partition(b"\r\n\r\n")
            headers = dict(line.split(": ", 1) for line in head.decode("utf-8").split("\r\n") if ": " in line)
            yield headers, body
            buffer = buffer[end + 2:]
    raise _Truncated("the response ended before its closing delimiter")
