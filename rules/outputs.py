"""A rule's output elements appended to its output stream exactly once, in strictly increasing time.

Both kinds of rule use it: window rules (``rules.firing``, one firing per completed window) and event rules
(``rules.event_rules``, one evaluation per new match). Each output element carries an ``origin`` naming the rule and
what it fired on; an element whose origin the output stream already holds was committed by a run that crashed before
it recorded its firing or its matcher's state, and is not appended again.
"""

from __future__ import annotations

from collections.abc import Iterable

from store.durable import now_micros
from store.elements import ParsedElement
from store.stream import Stream


def append_once(output: Stream, elements: Iterable[ParsedElement]) -> list[ParsedElement]:
    """Queue on ``output`` each of ``elements`` whose origin it does not hold yet; returns those queued (the caller
    flushes the stream to make them durable).

    An element's time that is missing or not after the output stream's time becomes stream time + 1 µs (the receipt
    time on an empty stream), and its timestamp literal is then written anew from it: the output stream is a
    distinct time series whichever rules write to it."""
    queued: list[ParsedElement] = []
    for element in elements:
        if output.has_origin(element.origin):  # type: ignore[arg-type]  # (a rule's elements all carry an origin)
            continue
        last = output.accepted_time
        if element.time is None or (last is not None and element.time <= last):
            element.time = (last + 1) if last is not None else now_micros()
            element.stamp = None  # a moved time is written anew (UTC); an unmoved one is kept as the rule made it
        output.accept(element, now_micros())
        queued.append(element)
    return queued
