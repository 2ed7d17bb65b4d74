"""A small Python client: upload a generator of elements, iterate a continuous response (docs/continuous.md).

>>> from concentrator.client import upload, windows          # doctest: +SKIP
>>> upload("http://127.0.0.1:8080/streams/hr", trig_elements())  # one chunked request, committed as it goes
>>> for window in windows("http://127.0.0.1:8080/streams/hr", "R3/HEAD/PT1M", query="SELECT …"):
...     print(window.index, window.start, window.end, window.body)

Only ``requests``: a continuous response is read as ``multipart/mixed`` (each window a part with its own
headers), so window boundaries and bounds survive any proxy that re-chunks the response.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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


def upload(url: str, elements: Iterable[str | bytes], content_type: str = "application/trig",
           session: requests.Session | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Send ``elements`` (TriG / N-Quads text, an element or several per item) as one chunked upload; each
    element is committed as it arrives. Returns the server's answer (committed count, ordinals, stream time)."""
    http = session or requests.Session()
    body = (item.encode("utf-8") if isinstance(item, str) else item for item in elements)
    response = http.post(url, data=body, headers={"Content-Type": content_type}, timeout=timeout)
    if not response.ok:
        raise ClientError(f"{response.status_code}: {response.text.strip()}")
    return response.json()  # type: ignore[no-any-return]


def windows(url: str, window_ref: str, query: str | None = None, format: str | None = None,  # noqa: A002
            report: str | None = None, operator: str | None = None,
            session: requests.Session | None = None) -> Iterator[Window]:
    """Iterate the windows of a continuous response on ``url?WINDOWS=window_ref`` (``R…``) as they complete.
    Ends when the response ends (``Rn``); closing the iterator disconnects."""
    http = session or requests.Session()
    params = {"WINDOWS": window_ref, "packaging": "multipart"}
    for key, value in (("query", query), ("format", format), ("report", report), ("operator", operator)):
        if value is not None:
            params[key] = value
    with http.get(url, params=params, stream=True, timeout=(30, None)) as response:
        if not response.ok:
            raise ClientError(f"{response.status_code}: {response.text.strip()}")
        boundary = response.headers["Content-Type"].split("boundary=", 1)[1].strip('"')
        for headers, body in _parts(response.iter_content(chunk_size=None), boundary.encode()):
            if "Window-Index" not in headers:
                continue  # the server's closing notice (e.g. a client too far behind)
            yield Window(int(headers["Window-Index"]), headers.get("Window-Id", ""), headers.get("Window-Start", ""),
                         headers.get("Window-End", ""), headers.get("Window-Committed", ""),
                         headers.get("Content-Type", ""), body)


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
