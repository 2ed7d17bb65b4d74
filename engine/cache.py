"""Results of queries that read only the dataset (or one window), kept per revision of it (seed 003: "unchanged
intermediate results are cached and re-used").

A rule's static parts (the patient and sensor records, VALUES tables: the prefix that binds a ``SERVICE ?var``,
a ``SERVICE <this server's /sparql>`` part) give the same solutions until the dataset changes, so they are
evaluated once per dataset revision instead of once per window. The key holds the revision ordinal, so a
write simply makes new keys; old entries age out of the LRU. The same holds for a window: its elements never change,
so the static parts of the rules reading one window (their common ``SERVICE`` inner ``SELECT``) are evaluated once
for all of them, under a key naming the window's elements (``engine.selection.elements_key``). Queries calling
functions whose value changes between evaluations (``NOW()``, ``RAND()``, ``UUID()``, ``STRUUID()``, ``BNODE()``,
``THEN()``) are never cached.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from sparql_ext import THEN_FUNCTION
from sparql_ext.errors import QuerySyntaxError
from sparql_ext.lexer import Kind, tokenize

T = TypeVar("T")
_VOLATILE = re.compile(r"\b(?:NOW|RAND|UUID|STRUUID|BNODE)\s*\(|urn:x-concentrator:fn:then", re.IGNORECASE)
_VOLATILE_CALLS = frozenset({"NOW", "RAND", "UUID", "STRUUID", "BNODE"})


@functools.lru_cache(maxsize=4096)
def is_static(sparql: str) -> bool:
    """Whether a query's answer depends only on the dataset it reads (no volatile function calls).

    Calls are found among the query's tokens, so a comment or a string that mentions one (the connected-patient
    rule's "not NOW()") does not make its prefix uncacheable. ``THEN()`` counts wherever its IRI appears.

    >>> is_static("SELECT ?x WHERE { ?x ?p ?o }  # not NOW()"), is_static("SELECT (NOW() AS ?t) {}")
    (True, False)
    """
    if THEN_FUNCTION in sparql:
        return False
    try:
        tokens = list(tokenize(sparql))
    except QuerySyntaxError:  # not text the tokenizer reads: the characters decide (a mention counts)
        return _VOLATILE.search(sparql) is None
    return not any(token.kind is Kind.WORD and token.text.upper() in _VOLATILE_CALLS and following.text == "("
                   for token, following in itertools.pairwise(tokens))


class StaticResults(Generic[T]):
    """A thread-safe LRU of results keyed by (query text, dataset revision, anything else the answer depends on:
    base IRI, default and named graphs), with hit/miss counts."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, int, str], T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sparql: str, revision: int, context: str, compute: Callable[[], T]) -> T:
        key = (sparql, revision, context)
        with self._lock:
            if key in self._entries:
                self.hits += 1
                self._entries.move_to_end(key)
                return self._entries[key]
            self.misses += 1
        value = compute()  # outside the lock: two first evaluations may race; both give the same value
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return value

    def status(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "entries": len(self._entries)}
