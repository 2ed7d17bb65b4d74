"""The query parameters each endpoint reads, and near misses of them.

An unknown parameter is ignored (SPARQL clients send their own extras: ``format=``, ``output=``…), unless it is a
**near miss** of one the endpoint reads: the same name in another case, or one edit away (a letter missing, added,
replaced, or two neighbours swapped). ``GET /streams/hr?WINDOW=HEAD/-PT05M`` would otherwise answer 200 over the
whole stream; it gets ``400 unknown parameter WINDOW: did you mean WINDOWS?`` instead. docs/http.md lists the
parameters of every endpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flask import request

from protocol.errors import BadRequest

FORM = "application/x-www-form-urlencoded"
View = TypeVar("View", bound=Callable[..., Any])


def within_one_edit(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with at most one letter inserted, deleted, replaced, or two neighbours swapped
    (optimal string alignment distance ≤ 1).

    >>> [within_one_edit("graph", other) for other in ("graph", "grap", "graphs", "grahp", "graff", "rgaph")]
    [True, True, True, True, False, True]
    """
    if a == b:
        return True
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    if len(long) - len(short) != 1:
        return False
    first = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[first:] == long[first + 1:]


def near_miss(known: Iterable[str], given: Iterable[str]) -> tuple[str, str] | None:
    """The first given name that is not known but is a near miss of a known one, as ``(given, known)``; None
    when there is none. Names equal but for case are preferred over names one edit away."""
    known = sorted(set(known))
    for name in given:
        if name in known:
            continue
        folded = name.casefold()
        same_case = [k for k in known if k.casefold() == folded]
        close = same_case or [k for k in known if within_one_edit(k.casefold(), folded)]
        if close:
            return name, close[0]
    return None


def check_parameters(known: Iterable[str], given: Iterable[str]) -> None:
    """Raise ``BadRequest`` naming the expected parameter when a given one is a near miss of it."""
    miss = near_miss(known, given)
    if miss is not None:
        raise BadRequest(f"unknown parameter {miss[0]}: did you mean {miss[1]}?")


def name_list(parameter: str, known: Iterable[str], what: str) -> set[str] | None:
    """The comma-separated names of query parameter ``parameter`` (``?fields=a,b``), None when it is absent; a name
    not in ``known`` is a ``BadRequest`` listing them (``what``: what a name names, e.g. "rule field")."""
    if parameter not in request.args:
        return None
    names = {name.strip() for name in request.args[parameter].split(",") if name.strip()}
    known = list(known)
    unknown = sorted(names - set(known))
    if unknown:
        raise BadRequest(f"{parameter}: no {what} {', '.join(map(repr, unknown))}; the {what}s are {', '.join(known)}")
    return names


def reads(*names: str) -> Callable[[View], View]:
    """Declare the query (and ``application/x-www-form-urlencoded`` form) parameters a view reads; a request
    with a near miss of one of them is refused before the view runs."""
    known = frozenset(names)

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def checked(*args: Any, **kwargs: Any) -> Any:
            given = list(request.args)
            if request.mimetype == FORM:  # never parse other bodies here: uploads are read as they stream
                given += [name for name in request.form if name not in given]
            check_parameters(known, given)
            return view(*args, **kwargs)

        checked.parameters = known  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return decorate
