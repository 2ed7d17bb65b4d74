"""Cross-origin requests (the Fetch standard's CORS protocol), so that a page served elsewhere (YASGUI, Comunica in a
browser) may query this server: off unless ``serve --cors ORIGIN`` names the origins allowed (``*``: any), answered
on every response to a request with an allowed ``Origin``, and preflights (``OPTIONS`` with
``Access-Control-Request-Method``) answered before any other check (a preflight carries no token).

An origin named explicitly may send credentials (cookies, HTTP authentication: ``Access-Control-Allow-Credentials``);
``*`` never may: its answers say ``Access-Control-Allow-Origin: *`` and nothing of credentials. A bearer token is a
header, not a credential in this sense: it is allowed to every allowed origin (``Access-Control-Allow-Headers``).
"""

from __future__ import annotations

from flask import Flask, Response, current_app, request

#: request headers a cross-origin page may send (a preflight asks for them by name)
ALLOWED_HEADERS = ("Accept", "Accept-Datetime", "Authorization", "Content-Type", "Content-Encoding", "Last-Event-ID",
                   "Silent", "X-HTTP-Method-Override")
#: response headers a cross-origin page may read besides the CORS-safelisted ones
EXPOSED_HEADERS = ("Revision-Id", "Revision-Ordinal", "Location", "Link", "Memento-Datetime", "Content-Location",
                   "Window-Sequence", "Window-From", "Window-Index", "Window-Id", "Window-Elements", "Window-Start",
                   "Window-End", "Elements-Committed", "Retry-After", "WWW-Authenticate", "Allow", "Warning", "ETag")
PREFLIGHT_MAX_AGE = 600  # seconds a browser may keep a preflight's answer


def allowed_origin(origins: tuple[str, ...], origin: str | None) -> tuple[str, bool] | None:
    """What ``Access-Control-Allow-Origin`` says to ``origin``, and whether credentials are allowed; None when the
    origin is not allowed.

    >>> allowed_origin(("https://yasgui.example",), "https://yasgui.example")
    ('https://yasgui.example', True)
    >>> allowed_origin(("*",), "https://any.example"), allowed_origin(("https://a.example",), "https://b.example")
    (('*', False), None)
    """
    if not origin:
        return None
    if origin in origins:
        return origin, True
    if "*" in origins:
        return "*", False
    return None


def install(app: Flask, origins: tuple[str, ...]) -> None:
    """Answer preflights and add the CORS headers to every response (nothing when ``origins`` is empty)."""
    if not origins:
        return

    @app.before_request
    def _preflight() -> Response | None:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        allowed = allowed_origin(origins, request.headers.get("Origin"))
        if allowed is None:
            return None  # answered as any OPTIONS, without CORS headers: the browser refuses the request
        response = Response(status=204)
        del response.headers["Content-Type"]
        response.headers["Access-Control-Allow-Methods"] = ", ".join(_methods())
        response.headers["Access-Control-Allow-Headers"] = ", ".join(ALLOWED_HEADERS)
        response.headers["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE)
        return response

    @app.after_request
    def _headers(response: Response) -> Response:
        allowed = allowed_origin(origins, request.headers.get("Origin"))
        response.vary.add("Origin")
        if allowed is None:
            return response
        origin, credentials = allowed
        response.headers["Access-Control-Allow-Origin"] = origin
        if credentials:
            response.headers["Access-Control-Allow-Credentials"] = "true"
        if request.method != "OPTIONS":
            response.headers["Access-Control-Expose-Headers"] = ", ".join(EXPOSED_HEADERS)
        return response


def _methods() -> list[str]:
    """The methods the requested URL accepts: those Flask's own ``OPTIONS`` lists in ``Allow``."""
    adapter = current_app.create_url_adapter(request)
    return sorted(adapter.allowed_methods()) if adapter is not None else []
