"""SERVICE chains: a request that arrives through a SERVICE call says how many led to it (``HOPS_HEADER``); the
engine passes the count on, one more, with every HTTP SERVICE call the request's query makes, and refuses a chain
longer than ``MAX_SERVICE_HOPS`` (508). A query that calls this server back under a name it does not know as its
own (another address, another ``Host``) therefore stops after a few hops instead of holding a thread per hop."""

from __future__ import annotations

from flask import Flask, g, request

from engine.remote import HOPS_HEADER, MAX_SERVICE_HOPS, service_hops
from protocol.errors import BadRequest


def install(app: Flask) -> None:
    @app.before_request
    def _arrived() -> None:
        text = request.headers.get(HOPS_HEADER)
        if text is None:
            return
        if not text.isdigit() or int(text) > MAX_SERVICE_HOPS:
            raise BadRequest(f"{HOPS_HEADER}: {text[:20]!r} is not a count of SERVICE calls from 0 to "
                             f"{MAX_SERVICE_HOPS}")
        g.service_hops = service_hops.set(int(text))

    @app.teardown_request
    def _left(_error: BaseException | None) -> None:
        token = g.pop("service_hops", None)
        if token is not None:
            service_hops.reset(token)
