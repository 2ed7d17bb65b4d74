"""The web console (``/console``, linked from ``/``): static files served from the package
(``protocol/console_static/``: one HTML page, one script, one style sheet; no build step, no library). The page
reads what any client reads — ``/status``, ``/streams``, ``/rules``, ``/queries``, windowed IRIs and registered
queries' results over WebSockets, ``/sparql`` — and writes with the token the user gives it, so it is bound by the
same access rules (docs/console.md)."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, send_from_directory

from protocol.access import open_to_all
from protocol.errors import NotFound
from protocol.parameters import reads

bp = Blueprint("console", __name__)

CONSOLE_DIR = Path(__file__).resolve().parent / "console_static"
ASSETS = ("console.js", "console.css")
# Only the console's own files run: no inline script or style, no other origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@bp.route("/", methods=["GET"])
@open_to_all
@reads()
def home() -> Response:
    """A page that links to the console, /status, /metrics and the stream list."""
    return _file("home.html")


@bp.route("/console", methods=["GET"])
@open_to_all
@reads()
def console() -> Response:
    return _file("index.html")


@bp.route("/console/<name>", methods=["GET"])
@open_to_all
@reads()
def asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound(f"the console has no file {name!r} (it serves {', '.join(ASSETS)})")
    return _file(name)


def _file(name: str) -> Response:
    response = send_from_directory(CONSOLE_DIR, name, max_age=0)
    response.headers.update(SECURITY_HEADERS)
    return response
