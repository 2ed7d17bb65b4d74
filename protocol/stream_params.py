"""Reading stream requests' parameters, including what real SPARQL engines send for ``SERVICE``.

Pure functions of the query string and headers (no Flask request object), so each client's form
is tested alone. What each engine sends (observed, see conformance/clients.py):

- pyoxigraph: ``POST /streams/s?WINDOWS=…`` with an ``application/sparql-query`` body.
- Jena ARQ 4.5: ``GET /streams/s?WINDOWS=…&query=…``; a ``+`` of a timezone offset arrives raw and
  a form decoder makes it a space (``sparql_ext.revision`` reads the space back as ``+``).
- Comunica 5.4: appends ``?query=`` to an IRI that already has a query string
  (``/streams/s?WINDOWS=HEAD/-PT05M?query=SELECT…``): a ``?`` cannot occur in a WindowRef, so
  whatever follows a ``?`` inside the WINDOWS value is read as more parameters. Before querying,
  it GETs the IRI to identify it and treats it as a SPARQL endpoint only if the RDF it gets back
  says ``[] sd:endpoint <IRI>``.
"""

from __future__ import annotations

import isodate

from protocol.errors import BadRequest
from sparql_ext.windowed import WindowedParams, windowed_params

__all__ = ["WindowedParams", "duration_micros", "is_service_identification", "mqtt_topic_filter", "timeout_seconds",
           "windowed_params"]


def is_service_identification(user_agent: str | None, has_query: bool) -> bool:
    """Comunica's identification GET (no query): it needs a service description, not the data."""
    return not has_query and bool(user_agent) and user_agent.startswith("Comunica/")  # type: ignore[union-attr]


def duration_micros(text: str, parameter: str) -> int:
    """An xsd:duration of fixed length (no years or months) in µs."""
    try:
        value = isodate.parse_duration(text)
    except (isodate.ISO8601Error, ValueError):
        raise BadRequest(f"{parameter}={text!r} is not an xsd:duration such as PT30S or PT5M") from None
    if isinstance(value, isodate.Duration):
        raise BadRequest(f"{parameter}={text!r}: years and months are not fixed lengths; use days or less")
    micros: int = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros < 0:
        raise BadRequest(f"{parameter}={text!r} is negative")
    return micros


def timeout_seconds(text: str | None, default: float, limit: float = 3600.0) -> float:
    """The ``timeout`` parameter: seconds to wait for a window to complete."""
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"timeout={text!r} is not a number of seconds") from None
    if not 0 <= value <= limit:
        raise BadRequest(f"timeout={text!r} must be between 0 and {limit:g} seconds")
    return value


def mqtt_topic_filter(text: str, parameter: str, *, wildcards: bool = True) -> str:
    """An MQTT topic filter (``mqtt-topic``; MQTT 5 §4.7: ``+`` is a whole level, ``#`` the whole last level), or
    with ``wildcards`` False a topic name to publish to.

    >>> mqtt_topic_filter("ward/+/hr", "mqtt-topic"), mqtt_topic_filter("ward/#", "mqtt-topic")
    ('ward/+/hr', 'ward/#')
    >>> mqtt_topic_filter("ward/h+", "mqtt-topic")
    Traceback (most recent call last):
    ...
    protocol.errors.BadRequest: mqtt-topic='ward/h+': '+' and '#' stand for whole topic levels ('ward/+/hr', 'ward/#')
    """
    levels = text.split("/")
    if not text or "\0" in text or len(text.encode("utf-8")) > 65535:
        raise BadRequest(f"{parameter}={text!r} is not an MQTT topic: give 1 to 65535 bytes of UTF-8, without NUL")
    if not wildcards and ("+" in text or "#" in text):
        raise BadRequest(f"{parameter}={text!r}: a topic to publish to has no wildcard ('+', '#')")
    for position, level in enumerate(levels):
        if ("+" in level and level != "+") or ("#" in level and (level != "#" or position != len(levels) - 1)):
            raise BadRequest(f"{parameter}={text!r}: '+' and '#' stand for whole topic levels ('ward/+/hr', "
                             "'ward/#')")
    return text
