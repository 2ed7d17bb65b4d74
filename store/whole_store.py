"""Reads and writes of the whole store that Dydra's clients expect, over the dataset's own API (``dataset.py``):
emptying it, its named graphs without the default graph, and revision ranges.

A **revision range** ``A--B`` (``revision-id=A--B``, ``*`` for an open end) reads, as Dydra does, the **union of the
states** of revisions A through B: every quad present after at least one of them. That is the state after A plus the
quads each of A+1…B inserted (a quad absent after A and present after some later revision of the range was inserted
by one of them). Cost: O(|state after A| + Σ insert deltas of A+1…B), held in an in-memory store; pyoxigraph loads
the deltas, so a quad inserted twice is one quad.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from pyoxigraph import Quad, RdfFormat, Store

from sparql_ext.revision import RevisionRange
from store.dataset import Commit, RevisionedDataset
from store.errors import RevisionNotFound, RevisionNotRetained
from store.history import History

NQ = RdfFormat.N_QUADS


def empty(dataset: RevisionedDataset, operation: str = "gsp-delete") -> Commit:
    """Remove every graph and quad (Graph Store ``DELETE /store``): one transaction and one revision, whose delete
    delta is the whole former state (a whole-dataset replace by nothing)."""
    return dataset.replace(None, dataset.stage(b"", NQ), operation)


def named_quads(store: Store) -> Iterator[Quad]:
    """The quads of every named graph of ``store`` (Dydra's ``urn:dydra:named``), graph by graph."""
    for graph in store.named_graphs():
        yield from store.quads_for_pattern(None, None, None, graph)


def resolve_range(dataset: RevisionedDataset, spec: RevisionRange, spelled: str) -> tuple[int, int]:
    """The first and last ordinals of a revision range; ``spelled``: the user's text, for messages."""
    first = dataset.oldest_readable if spec.first is None else dataset.resolve(spec.first)
    last = dataset.head if spec.last is None else dataset.resolve(spec.last)
    assert first is not None and last is not None  # resolve() gives None only for no designator
    if first > last:
        raise RevisionNotFound(f"revision range {spelled!r} ends (revision {last}) before it starts "
                               f"(revision {first}); give the older revision first")
    return first, last


@contextmanager
def union_of_revisions(dataset: RevisionedDataset, first: int, last: int) -> Iterator[Store]:
    """An in-memory store holding every quad present after at least one of the revisions ``first``…``last``."""
    union = Store()
    with dataset.reading(first) as state, tempfile.TemporaryFile() as dump:
        state.dump(dump, NQ)
        dump.seek(0)
        union.bulk_load(dump, NQ)
    history = History(dataset.directory / "history")  # the dataset's layout, read only: committed deltas never change
    try:
        for ordinal in range(first + 1, last + 1):
            inserted, _ = history.delta_paths(ordinal)
            if inserted.stat().st_size:
                union.bulk_load(path=str(inserted), format=NQ)
    except FileNotFoundError:  # retention dropped the deltas meanwhile
        raise RevisionNotRetained(f"revision {first} is older than the retained history; the oldest readable "
                                  f"revision is {dataset.oldest_readable}") from None
    yield union
