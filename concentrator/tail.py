"""``concentrator tail URL WINDOWS``: a continuous response followed in a terminal, each window printed as it
completes; and what the command line's other clients share (is it a URL, the system's words for a failed
connection)."""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlsplit


def is_http_url(text: str) -> bool:
    parts = urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _tail_usage_error(url: str, window_ref: str) -> str | None:
    """What is wrong with ``tail URL WINDOWS`` (one line saying how to write it), or None."""
    from sparql_ext.errors import WindowRefSyntaxError
    from sparql_ext.windowref import parse_window_ref

    if not is_http_url(url) and _is_window_ref(url):
        return f"the arguments are swapped: write concentrator tail {window_ref} {url}"
    if not is_http_url(url):
        if "://" not in url:
            return f"{url!r} is not a URL: write http://{url}"
        return f"{url!r}: give an http:// or https:// URL, e.g. http://127.0.0.1:8080/streams/hr"
    try:
        ref = parse_window_ref(window_ref)
    except WindowRefSyntaxError as error:
        return str(error)
    if not ref.repeating:
        return (f"{window_ref!r} is one window: tail needs a repeating WindowRef (R/…), e.g. R/HEAD/PT05M/PT01M "
                f"(GET {url}?WINDOWS={window_ref} answers the one window)")
    return None


def _is_window_ref(text: str) -> bool:
    from sparql_ext.errors import WindowRefSyntaxError
    from sparql_ext.windowref import parse_window_ref

    try:
        parse_window_ref(text)
    except WindowRefSyntaxError:
        return False
    return True


def os_reason(error: BaseException) -> str:
    """The operating system's words for a failed connection (e.g. 'Connection refused'), found among its causes
    (requests wraps urllib3's error, which wraps the socket's)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(error)


def tail(args: argparse.Namespace) -> int:
    """Print each window of a continuous response as it completes, under a one-line header."""
    import requests

    from concentrator.client import ClientError, windows

    problem = _tail_usage_error(args.url, args.windows)
    if problem is not None:
        print(f"concentrator tail: {problem}", file=sys.stderr)
        return 2
    server = "{0.scheme}://{0.netloc}".format(urlsplit(args.url))
    if sys.stderr.isatty():  # a person watching: say why nothing appears yet (windows can be minutes apart)
        print(f"concentrator tail: waiting for the first window of {args.windows} (Ctrl-C stops)", file=sys.stderr,
              flush=True)
    received = 0
    try:
        for window in windows(args.url, args.windows, query=args.query, format=args.format, report=args.report,
                              operator=args.operator):
            received += 1
            print(f"# window {window.index} [{window.start}, {window.end}) committed {window.committed}", flush=True)
            sys.stdout.write(window.body.decode("utf-8"))
            if not window.body.endswith(b"\n"):
                sys.stdout.write("\n")
            sys.stdout.flush()
    except ClientError as error:
        print(f"concentrator tail: {error}", file=sys.stderr)
        return 1
    except requests.ConnectionError as error:
        if received:
            print(f"concentrator tail: the connection to {server} was lost: {os_reason(error)}", file=sys.stderr)
        else:
            print(f"concentrator tail: no server answers at {server}: is it running? ({os_reason(error)})",
                  file=sys.stderr)
        return 1
    except requests.RequestException as error:
        print(f"concentrator tail: the response from {server} failed: {os_reason(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
