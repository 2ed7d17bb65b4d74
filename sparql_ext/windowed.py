"""The ``WINDOWS`` parameter of a windowed stream IRI's query string (pure: no Flask).

Used by the protocol for requests and by the evaluator for ``SERVICE <…/streams/s?WINDOWS=…>``, so
both read a windowed IRI by the same rules (see ``protocol.stream_params`` for what clients send).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote_plus

from sparql_ext.errors import WindowRefSyntaxError


@dataclass(frozen=True)
class WindowedParams:
    """The windowed-IRI parameters of a request."""

    windows: str | None  # the WindowRef text, None for the stream itself
    extra: dict[str, list[str]] = field(default_factory=dict)  # parameters found inside WINDOWS


def windowed_params(query_string: str) -> WindowedParams:
    """The WINDOWS parameter of a raw (undecoded) query string, split where a client appended
    ``?query=…`` to it. Working on the raw string decodes the appended parameters exactly once
    (a query's ``%26`` stays an ``&`` inside the query, its ``%2B`` a ``+``).

    >>> windowed_params("WINDOWS=HEAD/-PT05M?query=SELECT%20*%20%7B%20FILTER(1%2B1%3D2%20%26%26%20true)%20%7D")
    WindowedParams(windows='HEAD/-PT05M', extra={'query': ['SELECT * { FILTER(1+1=2 && true) }']})
    >>> windowed_params("WINDOWS=2016-06-20T10:00:00+02:00/PT05M&query=ASK%7B%7D").windows
    '2016-06-20T10:00:00 02:00/PT05M'
    >>> windowed_params("query=ASK%7B%7D")
    WindowedParams(windows=None, extra={})
    """
    values = [value for key, _, value in (part.partition("=") for part in query_string.split("&"))
              if unquote_plus(key) == "WINDOWS"]
    if not values:
        return WindowedParams(None)
    if len(values) > 1:
        raise WindowRefSyntaxError(f"WINDOWS is given {len(values)} times; a windowed IRI names one WindowRef")
    raw_ref, _, rest = values[0].partition("?")
    ref = unquote_plus(raw_ref).strip()  # like any form decoder: a raw '+' becomes a space
    extra: dict[str, list[str]] = {}
    for key, value in parse_qsl(rest, keep_blank_values=True):
        extra.setdefault(key, []).append(value)
    if not ref:
        raise WindowRefSyntaxError("WINDOWS is empty: give a WindowRef such as HEAD/-PT05M or R/HEAD/PT05M/PT01M")
    return WindowedParams(ref, extra)
