"""A stream's configuration: what ``PUT /streams/{name}`` sets, kept in ``<data>/streams/<name>/config.json``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from store.elements import PROV_GENERATED_AT_TIME
from store.formats import MESSAGE_FORMATS

__all__ = ["MESSAGE_FORMATS", "LdesConfig", "MqttConfig", "StreamConfig"]


@dataclass(frozen=True)
class MqttConfig:
    """A stream fed from MQTT (connectors/mqtt_in.py, docs/connectors.md), checked by ``connectors.mqtt_in``: the
    topic filters subscribed to (none: not fed from MQTT), the media type of a message without an MQTT 5 content
    type, the predicate whose object is a Turtle / JSON-LD message's timestamp (None: receipt time), the IRI template
    of such a message's element graph, and the stream bad messages go to (None: ``<name>-dead-letter``)."""

    topics: tuple[str, ...] = ()
    format: str = "application/trig"
    timestamp_path: str | None = None
    graph_template: str | None = None
    dead_letter: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))  # given as a list too (JSON, a request's values)


@dataclass(frozen=True)
class LdesConfig:
    """A stream's LDES (docs/connectors.md): its own pages, one per ``page`` µs of stream time (store/ldes.py, which
    checks it); and, with ``source``, the remote LDES it follows (connectors/ldes.py, which checks these) — its
    members' timestamp path (None: the LDES's own ldes:timestampPath) and the seconds between polls of its open
    pages."""

    page: int = 60_000_000
    source: str | None = None
    timestamp_path: str | None = None
    poll: float = 1.0


# config.json with the transports' settings as top-level keys (older data directories): read into the blocks
_FLAT_MQTT = {"mqtt_topics": "topics", "mqtt_format": "format", "timestamp_path": "timestamp_path",
              "graph_template": "graph_template", "dead_letter": "dead_letter"}
_FLAT_LDES = {"ldes_page": "page", "ldes_source": "source", "ldes_timestamp_path": "timestamp_path",
              "ldes_poll": "poll"}


@dataclass
class StreamConfig:
    """What ``PUT /streams/{name}`` sets; each transport's settings in a block of its own (``mqtt``, ``ldes``)."""

    name: str
    timestamp_predicate: str = PROV_GENERATED_AT_TIME
    lateness: int = 0  # µs of allowed lateness; 0 = distinct time series (strictly increasing)
    retention: int | None = None  # µs of stream time to keep; None = keep everything
    aliases: list[str] = field(default_factory=list)  # other IRIs (e.g. urn:uuid:…) naming this stream
    uuid_prefix: int = 0  # high 64 bits of this stream's revision UUIDs (random at creation)
    write_token_sha256: str | None = None  # a token that may write to this stream (protocol/access.py)
    public: bool = False  # its reads need no read token on a server with one (protocol/access.py)
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    ldes: LdesConfig = field(default_factory=LdesConfig)

    @property
    def dead_letter_stream(self) -> str:
        return self.mqtt.dead_letter or f"{self.name}-dead-letter"

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> StreamConfig:
        """The configuration ``to_json`` wrote, or one in the flat form (``mqtt_topics``, ``ldes_page``, …)."""
        top = dict(data)
        mqtt, ldes = _block(top.pop("mqtt", None)), _block(top.pop("ldes", None))
        for block, flat in ((mqtt, _FLAT_MQTT), (ldes, _FLAT_LDES)):
            for old, new in flat.items():
                if old in top:
                    block.setdefault(new, top.pop(old))
        return cls(**top, mqtt=MqttConfig(**mqtt), ldes=LdesConfig(**ldes))  # type: ignore[arg-type]


def _block(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}
