"""Syntax: everything in an extended query is checked by pyoxigraph before anything is evaluated, and its errors
are reported at the line and column of the text the user sent (not of any rewritten text)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from pyoxigraph import NamedNode, Store

from sparql_ext import THEN_FUNCTION, ExtendedQuery, ExtensionPart, QuerySyntaxError, parse_extended
from sparql_ext.errors import NestingTooDeep
from sparql_ext.lexer import check_derived
from sparql_ext.syntax_messages import explain_at, offset_of

_LOCATION = re.compile(r"\bat (\d+):(\d+)")
_EMPTY = Store()  # what syntax is checked on: nothing is ever written to it, so every thread shares it
Mapper = Callable[[int], int]  # an offset in some rewritten text -> an offset in the user's text


@functools.lru_cache(maxsize=4096)
def checked_query(text: str, base_iri: str | None) -> ExtendedQuery:
    """The parsed query, its main query and every part's checked by pyoxigraph (errors at the user's line and
    column). Cached: a rule evaluates the same text on every firing (parsing and checking were half of a
    firing's own time); a failing text raises and is not cached. Room for thousands of rules: with 1,000 rules
    firing in turn, a cache of 512 missed on every firing."""
    extended = parse_extended(text, base_iri)
    _check(extended, text, lambda offset: offset)
    return extended


def _check(extended: ExtendedQuery, user_text: str, to_user: Mapper) -> None:
    check_syntax(extended.sparql, user_text, lambda o: to_user(extended.original_offset(o)))
    for part in extended.parts:
        def part_to_user(offset: int, part: ExtensionPart = part) -> int:
            return to_user(part.original_offset(offset))
        if isinstance(part.inner, ExtendedQuery):
            _check(part.inner, user_text, part_to_user)
        else:
            check_syntax(part.inner, user_text, part_to_user)




def check_syntax(sparql: str, user_text: str, to_user: Mapper) -> None:
    """Let pyoxigraph judge ``sparql`` on an empty store; report its error at the user's line and column."""
    try:  # rewritten from the user's text, checked already, but pyoxigraph may read it otherwise
        check_derived(sparql, user_text)
    except NestingTooDeep as deep:
        raise NestingTooDeep(user_text, to_user(min(deep.offset, len(sparql))), deep.limit) from None
    functions: dict[NamedNode, Any] = {NamedNode(THEN_FUNCTION): lambda: None}
    try:
        _EMPTY.query(sparql, custom_functions=functions, base_iri="http://check.invalid/")
    except SyntaxError as error:
        message = str(error)
        found = _LOCATION.search(message)
        offset = offset_of(sparql, int(found[1]), int(found[2])) if found else 0
        detail = _LOCATION.sub("", message).replace("error :", "").strip().removeprefix("error").strip(" :")
        at, words = explain_at(user_text, to_user(min(offset, len(sparql))), detail)
        raise QuerySyntaxError(words, user_text, at) from None
    except (OSError, RuntimeError, ValueError):
        pass  # evaluation errors on an empty store say nothing about syntax


