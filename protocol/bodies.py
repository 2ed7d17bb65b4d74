"""Reading request bodies within limits (text, a JSON object), and the dataset parameters shared by the protocols."""

from __future__ import annotations

import json
from typing import Any

from flask import current_app, request

from protocol.errors import BadRequest
from store import BodyTooLarge

TEXT_BODY_LIMIT = 64 * 1024 * 1024  # a query or an update held in memory as text
_TOO_LONG = "is larger than the limit of {:,} bytes (64 MiB) for a query or an update"


def text_body(what: str) -> str:
    """The request body as UTF-8 text (a query or an update), at most TEXT_BODY_LIMIT bytes."""
    if request.content_length is not None and request.content_length > TEXT_BODY_LIMIT:
        raise BodyTooLarge(f"the {what} {_TOO_LONG.format(TEXT_BODY_LIMIT)}")
    data = request.stream.read(TEXT_BODY_LIMIT + 1)
    if len(data) > TEXT_BODY_LIMIT:
        raise BodyTooLarge(f"the {what} {_TOO_LONG.format(TEXT_BODY_LIMIT)}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"the {what} is not valid UTF-8 (byte {error.start})") from None


def json_object_body(what: str, shape: str) -> dict[str, Any]:
    """The request body as a JSON object (an empty body: ``{}``); 400 when it is not JSON or not an object, ``shape``
    saying what it should be (e.g. ``': {"topic": …}'``)."""
    try:
        body = json.loads(text_body(what) or "{}")
    except ValueError as error:
        raise BadRequest(f"the {what} is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the {what} is a JSON object{shape}")
    return body


def upload_limit() -> int | None:
    """The limit of a Graph Store body (``--max-body-bytes``, default ``store.limits.BODY_LIMIT``), as sent and as
    staged N-Quads; answers 413 at once when Content-Length exceeds it."""
    limit: int | None = current_app.config["CONCENTRATOR"].max_body_bytes
    if limit is not None and request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(f"request body of {request.content_length:,} bytes exceeds the limit of {limit:,} bytes "
                           "(server option --max-body-bytes)")
    return limit


def revision_parameter() -> str | None:
    values = request.args.getlist("revision-id")
    if len(values) > 1:
        raise BadRequest("revision-id is given more than once; give one revision")
    return values[0] if values else None
