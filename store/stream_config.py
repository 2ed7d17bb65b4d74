"""A stream's configuration: what ``PUT /streams/{name}`` sets, kept in ``<data>/streams/<name>/config.json``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from store.elements import PROV_GENERATED_AT_TIME
from store.formats import MESSAGE_FORMATS

__all__ = ["MESSAGE_FORMATS", "StreamConfig"]



@dataclass
class StreamConfig:
    """What ``PUT /streams/{name}`` sets."""

    name: str
    timestamp_predicate: str = PROV_GENERATED_AT_TIME
    lateness: int = 0  # µs of allowed lateness; 0 = distinct time series (strictly increasing)
    retention: int | None = None  # µs of stream time to keep; None = keep everything
    aliases: list[str] = field(default_factory=list)  # other IRIs (e.g. urn:uuid:…) naming this stream
    uuid_prefix: int = 0  # high 64 bits of this stream's revision UUIDs (random at creation)
    write_token_sha256: str | None = None  # a token that may write to this stream (protocol/access.py)
    # Fed from MQTT (connectors/, docs/connectors.md): the topic filters subscribed to, the media type of a message
    # without an MQTT 5 content type, the predicate whose object is a Turtle / JSON-LD message's timestamp (None:
    # receipt time), the IRI template of such a message's element graph, and where bad messages go.
    mqtt_topics: list[str] = field(default_factory=list)
    mqtt_format: str = "application/trig"
    timestamp_path: str | None = None
    graph_template: str | None = None
    dead_letter: str | None = None  # None: "<name>-dead-letter"

    @property
    def dead_letter_stream(self) -> str:
        return self.dead_letter or f"{self.name}-dead-letter"
    # LDES (docs/connectors.md): the stream published as an ldes:EventStream, one page per ``ldes_page`` µs of stream
    # time (store/ldes.py); and, with ``ldes_source``, fed by following a remote LDES (connectors/ldes.py) — its
    # members' timestamp path (None: the LDES's own ldes:timestampPath) and the seconds between polls of its open pages
    ldes_page: int = 60_000_000
    ldes_source: str | None = None
    ldes_timestamp_path: str | None = None
    ldes_poll: float = 1.0

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> StreamConfig:
        return cls(**data)  # type: ignore[arg-type]
