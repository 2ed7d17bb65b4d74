"""A stream's configuration and description as the HTTP surface gives them: the settings of ``PUT /streams/{name}``
(checked whole before anything changes: docs/streams.md, docs/connectors.md) and the JSON of ``GET /streams/{name}``
and of its window listings."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from flask import current_app, request

from engine.evaluation import host_allowed
from protocol.access import token_hash
from protocol.errors import BadRequest, Forbidden, HttpProblem
from protocol.services import services
from protocol.stream_params import duration_micros, mqtt_topic_filter
from sparql_ext.windowing import format_micros
from store.stream import Stream
from store.stream_config import MESSAGE_FORMATS, StreamConfig
from store.streams import check_stream_name
from store.terms import named_node
from store.windows import WindowRevision

RATE_PERIOD_SECONDS, RATE_PERIODS = 10, 30  # GET /streams/{name}: rate_history over the last 5 minutes


def iri_parameter(text: str, parameter: str) -> str:
    """An IRI given as ``parameter``; a 400 naming it when it is not one."""
    return named_node(text, parameter).value


LDES_SETTINGS = ("ldes-page", "ldes-source", "ldes-timestamp-path", "ldes-poll")
SETTINGS = ("timestamp-predicate", "lateness", "retention", "alias", "write-token", "mqtt-topic", "mqtt-format",
            "timestamp-path", "graph-template", "dead-letter", *LDES_SETTINGS)
LISTS = ("alias", "mqtt-topic")  # settings that take several values (repeat the parameter, or a JSON list)


def stream_config(name: str, options: dict[str, object], existing: Stream | None) -> StreamConfig:
    """The configuration ``PUT /streams/{name}`` asks for (``options``: its parameters or JSON body), checked whole
    before anything is changed; ``existing``: the stream as it is (its write token stays unless a new one is given)."""
    unknown = set(options) - set(SETTINGS)
    if unknown:
        raise BadRequest(f"unknown stream setting(s) {sorted(unknown)}: use {', '.join(SETTINGS)}")
    config = StreamConfig(name)
    if "write-token" in options:  # kept as a hash; an empty value removes it
        config.write_token_sha256 = token_hash(str(options["write-token"])) if options["write-token"] else None
    elif existing is not None:
        config.write_token_sha256 = existing.config.write_token_sha256
    if "timestamp-predicate" in options:
        config.timestamp_predicate = iri_parameter(str(options["timestamp-predicate"]), "timestamp-predicate")
    if "lateness" in options:
        config.lateness = duration_micros(str(options["lateness"]), "lateness")
    if "retention" in options:
        config.retention = duration_micros(str(options["retention"]), "retention")
    config.aliases = [iri_parameter(a, "alias") for a in _values(options, "alias")]
    _mqtt_settings(config, options)
    _ldes_settings(config, options)
    return config


def settings_of(config: StreamConfig) -> dict[str, object]:
    """The settings, as ``PUT`` takes them, that give ``config`` (those at their default left out; the write token,
    kept only as a hash, too: ``stream_config`` keeps it unless one is given)."""
    default = StreamConfig(config.name)
    found: dict[str, object] = {}
    if config.timestamp_predicate != default.timestamp_predicate:
        found["timestamp-predicate"] = config.timestamp_predicate
    if config.lateness:
        found["lateness"] = _duration(config.lateness)
    if config.retention is not None:
        found["retention"] = _duration(config.retention)
    if config.aliases:
        found["alias"] = list(config.aliases)
    if config.mqtt_topics:
        found["mqtt-topic"] = list(config.mqtt_topics)
    if config.mqtt_format != default.mqtt_format:
        found["mqtt-format"] = config.mqtt_format
    for key, value in (("timestamp-path", config.timestamp_path), ("graph-template", config.graph_template),
                       ("dead-letter", config.dead_letter)):
        if value is not None:
            found[key] = value
    if config.ldes_page != default.ldes_page:
        found["ldes-page"] = _duration(config.ldes_page)
    if config.ldes_source is not None:
        found["ldes-source"] = config.ldes_source
        if config.ldes_timestamp_path is not None:
            found["ldes-timestamp-path"] = config.ldes_timestamp_path
        if config.ldes_poll != default.ldes_poll:
            found["ldes-poll"] = _duration(round(config.ldes_poll * 1_000_000))
    return found


def _duration(micros: int) -> str:
    """µs as an xsd:duration in seconds (``PT90S``, ``PT0.5S``), as ``duration_micros`` reads it back exactly."""
    seconds, fraction = divmod(micros, 1_000_000)
    return f"PT{seconds}.{f'{fraction:06d}'.rstrip('0')}S" if fraction else f"PT{seconds}S"


def _values(options: dict[str, object], key: str) -> list[str]:
    given = options.get(key, [])
    return [str(v) for v in (given if isinstance(given, list) else [given])]


def _mqtt_settings(config: StreamConfig, options: dict[str, object]) -> None:
    """The settings of a stream fed from MQTT (docs/connectors.md), checked before anything is changed."""
    config.mqtt_topics = [mqtt_topic_filter(t, "mqtt-topic") for t in _values(options, "mqtt-topic")]
    if config.mqtt_topics and services().connectors.broker is None:
        raise HttpProblem("mqtt-topic: this server has no MQTT broker: start it with serve --mqtt mqtt://HOST:PORT",
                          409)
    if "mqtt-format" in options:
        config.mqtt_format = str(options["mqtt-format"]).strip().lower()
        if config.mqtt_format not in MESSAGE_FORMATS:
            raise BadRequest(f"mqtt-format={config.mqtt_format!r}: use one of {', '.join(MESSAGE_FORMATS)}")
    if "timestamp-path" in options:
        config.timestamp_path = iri_parameter(str(options["timestamp-path"]), "timestamp-path")
    if "graph-template" in options:
        template = str(options["graph-template"])
        sample = template.replace("{topic}", "t").replace("{uuid}", str(uuid.uuid4())).replace("{digest}", "d")
        iri_parameter(sample, "graph-template")
        if "{uuid}" not in template and "{digest}" not in template:
            raise BadRequest(f"graph-template={template!r}: put {{uuid}} (a fresh UUID per message) or {{digest}} (a "
                             "UUID of the topic and payload) in it: each element needs its own graph name")
        config.graph_template = template
    if "dead-letter" in options:
        config.dead_letter = check_stream_name(str(options["dead-letter"]))
        if config.dead_letter == config.name:
            raise BadRequest("dead-letter: a stream cannot be its own dead-letter stream")


def _ldes_settings(config: StreamConfig, options: dict[str, object]) -> None:
    """The LDES settings: the page duration of the stream's own LDES; the LDES it follows, if any (a host the
    operator allows, as for SERVICE: --service-allow), its members' timestamp path, the time between polls."""
    if "ldes-page" in options:
        config.ldes_page = duration_micros(str(options["ldes-page"]), "ldes-page")
        if config.ldes_page < 1_000_000:
            raise BadRequest(f"ldes-page={options['ldes-page']!r}: an LDES page spans at least a second (PT1S)")
    source = options.get("ldes-source")
    if source:
        config.ldes_source = str(source)
        parts = urlsplit(config.ldes_source)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadRequest(f"ldes-source={config.ldes_source!r} is not an http(s) URL of an LDES (its view, or "
                             "its event stream)")
        allowed = current_app.config["CONCENTRATOR"].service_allow
        if not host_allowed(config.ldes_source, None if allowed is None else frozenset(allowed)):
            raise Forbidden(f"ldes-source={config.ldes_source!r}: {parts.netloc} is not on this server's allowlist "
                            f"({', '.join(sorted(allowed)) or 'empty'}); the operator adds hosts with --service-allow")
    elif any(key in options for key in ("ldes-timestamp-path", "ldes-poll")):
        raise BadRequest("ldes-timestamp-path and ldes-poll apply to a stream that follows an LDES: give ldes-source")
    if "ldes-timestamp-path" in options:
        config.ldes_timestamp_path = iri_parameter(str(options["ldes-timestamp-path"]), "ldes-timestamp-path")
    if "ldes-poll" in options:
        config.ldes_poll = duration_micros(str(options["ldes-poll"]), "ldes-poll") / 1_000_000
        if not 0.1 <= config.ldes_poll <= 86_400:
            raise BadRequest(f"ldes-poll={options['ldes-poll']!r}: poll between every 0.1 s (PT0.1S) and once a day")


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
        "mqtt": None if not config.mqtt_topics else {
            "topics": config.mqtt_topics, "format": config.mqtt_format, "timestamp_path": config.timestamp_path,
            "graph_template": config.graph_template, "dead_letter": config.dead_letter_stream,
        },
        "ldes": {"view": request.host_url.rstrip("/") + "/streams/" + config.name + "/ldes",
                 "page_us": config.ldes_page, "source": config.ldes_source,
                 "timestamp_path": config.ldes_timestamp_path, "poll_seconds": config.ldes_poll},
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
