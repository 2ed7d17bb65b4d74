"""A stream's configuration and description as the HTTP surface gives them: the settings of ``PUT /streams/{name}``
(``SETTINGS``, the one list of them: docs/streams.md, docs/connectors.md; each value read before anything changes)
and the JSON of ``GET /streams/{name}`` and of its window listings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from flask import request

from protocol.access import token_hash
from protocol.errors import BadRequest
from protocol.stream_params import duration_micros, mqtt_topic_filter
from sparql_ext.windowing import format_micros
from store.stream import Stream
from store.stream_config import LdesConfig, MqttConfig, StreamConfig
from store.terms import named_node
from store.windows import WindowRevision

RATE_PERIOD_SECONDS, RATE_PERIODS = 10, 30  # GET /streams/{name}: rate_history over the last 5 minutes


def iri_parameter(text: str, parameter: str) -> str:
    """An IRI given as ``parameter``; a 400 naming it when it is not one."""
    return named_node(text, parameter).value


@dataclass(frozen=True)
class Setting:
    """One stream setting as ``PUT`` / ``PATCH /streams/{name}`` take it (a query parameter, or a key of a JSON
    body): its name, what its value is and what leaving it out means (docs/streams.md, docs/connectors.md), where it
    lives in ``StreamConfig`` (``block``: the stream's own fields, ``mqtt`` or ``ldes``), how its text is read (a 400
    naming it) and written back (None: never shown). What a transport's block means as a whole is checked by that
    transport (``StreamCatalog.checks``): the store's LDES pages, the connectors' MQTT and LDES following."""

    name: str
    kind: str
    default: str
    doc: str
    block: Literal["", "mqtt", "ldes"]
    attribute: str
    read: Callable[[str, str], object]
    write: Callable[[Any], object] | None
    repeatable: bool = False  # several values: repeat the parameter, or give a JSON list


def _text(text: str, _: str) -> str:
    return text


def _seconds(text: str, name: str) -> float:
    return duration_micros(text, name) / 1_000_000


def _boolean(text: str, name: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise BadRequest(f"{name}={text!r}: give true or false")
    return text.strip().lower() == "true"


def _duration(micros: int) -> str:
    """µs as an xsd:duration in seconds (``PT90S``, ``PT0.5S``), as ``duration_micros`` reads it back exactly."""
    seconds, fraction = divmod(micros, 1_000_000)
    return f"PT{seconds}.{f'{fraction:06d}'.rstrip('0')}S" if fraction else f"PT{seconds}S"


SETTINGS: tuple[Setting, ...] = (
    Setting("timestamp-predicate", "IRI", "prov:generatedAtTime", "the predicate of the timestamp triple", "",
            "timestamp_predicate", iri_parameter, str),
    Setting("lateness", "duration", "PT0S", "how much older than stream time an element may be", "", "lateness",
            duration_micros, _duration),
    Setting("retention", "duration", "keep all", "the stream time to keep", "", "retention", duration_micros,
            _duration),
    Setting("alias", "IRI", "none", "other IRIs naming this stream", "", "aliases", iri_parameter, list,
            repeatable=True),
    Setting("write-token", "text", "none; kept unless given", "a token that may write to this stream (empty: none)",
            "", "write_token_sha256", lambda text, _: token_hash(text) if text else None, None),
    Setting("public", "true or false", "false", "whether its reads need no read token (docs/access.md)", "",
            "public", _boolean, lambda value: "true" if value else "false"),
    Setting("mqtt-topic", "MQTT topic filter", "none: not fed from MQTT", "topic filters the stream is fed from",
            "mqtt", "topics", mqtt_topic_filter, list, repeatable=True),
    Setting("mqtt-format", "media type", "application/trig", "the media type of a message without a content type",
            "mqtt", "format", lambda text, _: text.strip().lower(), str),
    Setting("timestamp-path", "IRI", "the receipt time", "the predicate whose object is a message's time", "mqtt",
            "timestamp_path", iri_parameter, str),
    Setting("graph-template", "IRI template", "urn:uuid:{digest} with a timestamp-path, else urn:uuid:{uuid}",
            "the graph name of a message's element", "mqtt", "graph_template", _text, str),
    Setting("dead-letter", "stream name", "<name>-dead-letter", "the stream bad messages go to", "mqtt",
            "dead_letter", _text, str),
    Setting("ldes-page", "duration", "PT1M", "the page duration of the stream's own LDES", "ldes", "page",
            duration_micros, _duration),
    Setting("ldes-source", "URL", "none", "the LDES the stream follows", "ldes", "source",
            lambda text, _: text or None, str),
    Setting("ldes-timestamp-path", "IRI", "the LDES's ldes:timestampPath", "the predicate of a member's timestamp",
            "ldes", "timestamp_path", iri_parameter, str),
    Setting("ldes-poll", "duration", "PT1S", "the time between polls of the LDES", "ldes", "poll", _seconds,
            lambda seconds: _duration(round(seconds * 1_000_000))),
)
SETTING_NAMES = tuple(setting.name for setting in SETTINGS)


def stream_config(name: str, options: dict[str, object], existing: Stream | None) -> StreamConfig:
    """The configuration ``PUT /streams/{name}`` asks for (``options``: its parameters or JSON body), each value read
    before anything is changed (the catalog's checks then take the whole); ``existing``: the stream as it is (its
    write token stays unless a new one is given)."""
    unknown = set(options) - set(SETTING_NAMES)
    if unknown:
        raise BadRequest(f"unknown stream setting(s) {sorted(unknown)}: use {', '.join(SETTING_NAMES)}")
    blocks: dict[str, dict[str, Any]] = {"": {}, "mqtt": {}, "ldes": {}}
    for setting in SETTINGS:
        if setting.name in options:
            given = options[setting.name]
            blocks[setting.block][setting.attribute] = (
                [setting.read(text, setting.name) for text in _values(given)] if setting.repeatable
                else setting.read(str(given), setting.name))
    if "write-token" not in options and existing is not None:  # kept as a hash: absent means "keep it"
        blocks[""]["write_token_sha256"] = existing.config.write_token_sha256
    return StreamConfig(name, **blocks[""], mqtt=MqttConfig(**blocks["mqtt"]), ldes=LdesConfig(**blocks["ldes"]))


def settings_of(config: StreamConfig) -> dict[str, object]:
    """The settings, as ``PUT`` takes them, that give ``config`` (those at their default left out; the write token,
    kept only as a hash, too: ``stream_config`` keeps it unless one is given)."""
    default = StreamConfig(config.name)
    found: dict[str, object] = {}
    for setting in SETTINGS:
        value = getattr(_block(config, setting), setting.attribute)
        if setting.write is not None and value != getattr(_block(default, setting), setting.attribute):
            found[setting.name] = setting.write(value)
    return found


def _block(config: StreamConfig, setting: Setting) -> object:
    return config if not setting.block else getattr(config, setting.block)


def _values(given: object) -> list[str]:
    return [str(v) for v in (given if isinstance(given, list) else [given])]


def describe_stream(stream: Stream) -> dict[str, object]:
    head = stream.head()
    record = stream.record(head) if len(stream) else None
    config = stream.config
    return {
        "name": config.name,
        "iri": request.host_url.rstrip("/") + "/streams/" + config.name,
        "timestamp_predicate": config.timestamp_predicate,
        "lateness_us": config.lateness,
        "retention_us": config.retention,
        "aliases": config.aliases,
        "write_token": config.write_token_sha256 is not None,
        "public": config.public,
        "mqtt": None if not config.mqtt.topics else {
            "topics": list(config.mqtt.topics), "format": config.mqtt.format,
            "timestamp_path": config.mqtt.timestamp_path, "graph_template": config.mqtt.graph_template,
            "dead_letter": config.dead_letter_stream,
        },
        "ldes": {"view": request.host_url.rstrip("/") + "/streams/" + config.name + "/ldes",
                 "page_us": config.ldes.page, "source": config.ldes.source,
                 "timestamp_path": config.ldes.timestamp_path, "poll_seconds": config.ldes.poll},
        "elements": len(stream),
        "first_ordinal": stream.first_ordinal if len(stream) else None,
        "head": None if record is None else {
            "ordinal": record.ordinal, "time": format_micros(record.time), "graph": record.graph,
            "revision_id": str(stream.uuid_of(record.ordinal)), "committed": format_micros(record.commit),
        },
        "stream_time": None if stream.stream_time is None else format_micros(stream.stream_time),
        "punctuations": stream.punctuations,
        "rate_per_second": stream.rate(60_000_000),
        # the rate over the last minutes (the console draws it): elements/s per period, oldest first
        "rate_history": {"period_seconds": RATE_PERIOD_SECONDS,
                         "per_second": stream.rate_history(RATE_PERIOD_SECONDS * 1_000_000, RATE_PERIODS)},
        "sequences": [describe_sequence(stream, s.id) for s in stream.windows.sequences()],
    }


def describe_sequence(stream: Stream, ident: str) -> dict[str, object]:
    sequence = stream.windows.sequence(ident)
    latest = stream.windows.latest(ident)
    assert sequence is not None
    return {
        "id": ident, "ref": sequence.ref, "windows_emitted": stream.windows.emitted(ident),
        "latest": None if latest is None else describe_revision(sequence.spec.kind, latest),
    }


def describe_revision(kind: str, revision: WindowRevision) -> dict[str, object]:
    bounds = ({"start": revision.start, "end": revision.end} if kind == "count"
              else {"start": format_micros(revision.start), "end": format_micros(revision.end)})
    return {"index": revision.index, **bounds, "elements": [list(run) for run in revision.runs],
            "count": revision.count, "revision_id": revision.uuid, "committed": format_micros(revision.commit)}
