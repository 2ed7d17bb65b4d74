"""Publications: standing orders to publish a stream's window results (or elements) to an MQTT topic. The HTTP
layer registers them (``PUT /streams/{stream}/publications/{name}``); the MQTT connector
(``connectors.mqtt_out.Publications``) carries them out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Publication:
    """A standing order to publish to an MQTT topic (``PUT /streams/{stream}/publications/{name}``; docs/connectors.md,
    "MQTT out"): each window result of ``windows`` (a repeating WindowRef; ``query`` over each window, None: the
    window dataset, as a continuous response gives it), or, with ``windows`` None, each element of the stream (only
    those a rule made when ``rule`` names it: a rule's ``publish=``)."""

    stream: str
    name: str
    topic: str
    windows: str | None = None
    query: str | None = None
    media_type: str = "application/trig"
    report: str | None = None
    operator: str | None = None
    retain: bool = False
    base: str = ""  # the server's base URL: resolves the query's IRIs of this server
    rule: str | None = None


def rule_publication(rule: str, output: str, topic: str, base: str) -> Publication:
    """What a rule's ``publish=`` topic is: a publication of its output elements, named after it."""
    return Publication(output, f"rule-{rule}", topic, base=base, rule=rule)


class PublicationRegistry(Protocol):
    """What the HTTP layer asks of the MQTT publisher (``connectors.mqtt_out.Publications`` implements it)."""

    def put(self, publication: Publication) -> tuple[dict[str, object], bool]:
        """Start (or replace) a publication; returns its description and whether it is new."""
        ...

    def delete(self, stream: str, name: str) -> None: ...

    def describe(self, stream: str, name: str | None = None) -> list[dict[str, object]]: ...
