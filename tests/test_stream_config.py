"""A stream's configuration in blocks per transport (``StreamConfig.mqtt``, ``StreamConfig.ldes``): a data directory
whose ``config.json`` has the flat keys of earlier versions still loads, and is written back in the nested form; each
block is checked by its own part (the store's LDES pages, the connectors' MQTT and LDES following) whoever puts the
configuration; the settings as users send them (docs/streams.md, docs/connectors.md) stay accepted. Expected values
are worked out by hand from the requests and the files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from concentrator.compose import http_app, open_services
from connectors import ldes, mqtt_in
from connectors.broker import parse_broker
from connectors.errors import ConnectorSettingInvalid, NoBroker
from engine.errors import ServiceNotAllowed
from protocol import ServerConfig, create_app
from protocol.stream_settings import SETTINGS
from store.errors import InvalidStreamName, StreamSettingInvalid
from store.stream_config import LdesConfig, MqttConfig, StreamConfig
from store.streams import StreamCatalog

ROOT = Path(__file__).resolve().parents[1]
ALIAS = "urn:uuid:6f1c0e3a-0000-4000-8000-000000000001"
BROKER = parse_broker("mqtt://127.0.0.1:1883")  # only known, never connected to: no connector runs in these tests

# config.json as an earlier version wrote it, by hand: every transport setting a top-level key
FLAT = """{"name": "ward", "timestamp_predicate": "http://www.w3.org/ns/prov#generatedAtTime", "lateness": 5000000,
 "retention": null, "aliases": ["urn:uuid:6f1c0e3a-0000-4000-8000-000000000001"], "uuid_prefix": 4660,
 "write_token_sha256": null, "mqtt_topics": ["ward/+/hr", "ward/+/spo2"], "mqtt_format": "text/turtle",
 "timestamp_path": "urn:test:at", "graph_template": "urn:x:{digest}", "dead_letter": "ward-bad",
 "ldes_page": 120000000, "ldes_source": "http://127.0.0.1:9/ldes", "ldes_timestamp_path": "urn:test:t",
 "ldes_poll": 0.5}"""
FLAT_KEYS = {"mqtt_topics", "mqtt_format", "timestamp_path", "graph_template", "dead_letter", "ldes_page",
             "ldes_source", "ldes_timestamp_path", "ldes_poll"}


def flat_data_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "data" / "streams" / "ward"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(FLAT)
    return tmp_path / "data"


def test_a_flat_config_file_loads_into_the_blocks(tmp_path: Path) -> None:
    catalog = StreamCatalog(flat_data_dir(tmp_path) / "streams")
    try:
        assert catalog.get("ward").config == StreamConfig(
            "ward", lateness=5_000_000, aliases=[ALIAS], uuid_prefix=0x1234,
            mqtt=MqttConfig(("ward/+/hr", "ward/+/spo2"), "text/turtle", "urn:test:at", "urn:x:{digest}", "ward-bad"),
            ldes=LdesConfig(120_000_000, "http://127.0.0.1:9/ldes", "urn:test:t", 0.5))
    finally:
        catalog.close()


def test_a_flat_config_is_served_as_before_and_written_back_nested(tmp_path: Path) -> None:
    data = flat_data_dir(tmp_path)
    config = ServerConfig(data)
    client = create_app(config, open_services(config, BROKER)).test_client()
    described = client.get("/streams/ward").get_json()
    assert described["mqtt"] == {"topics": ["ward/+/hr", "ward/+/spo2"], "format": "text/turtle",
                                 "timestamp_path": "urn:test:at", "graph_template": "urn:x:{digest}",
                                 "dead_letter": "ward-bad"}
    assert described["ldes"] == {"view": "http://localhost/streams/ward/ldes", "page_us": 120_000_000,
                                 "source": "http://127.0.0.1:9/ldes", "timestamp_path": "urn:test:t",
                                 "poll_seconds": 0.5}
    assert client.patch("/streams/ward?lateness=PT1S").status_code == 204  # the others kept, the file rewritten
    written = json.loads((data / "streams" / "ward" / "config.json").read_text())
    assert not set(written) & FLAT_KEYS
    expected = {
        "name": "ward", "timestamp_predicate": "http://www.w3.org/ns/prov#generatedAtTime", "lateness": 1_000_000,
        "retention": None, "aliases": [ALIAS], "uuid_prefix": 4660, "write_token_sha256": None,
        "mqtt": {"topics": ["ward/+/hr", "ward/+/spo2"], "format": "text/turtle", "timestamp_path": "urn:test:at",
                 "graph_template": "urn:x:{digest}", "dead_letter": "ward-bad"},
        "ldes": {"page": 120_000_000, "source": "http://127.0.0.1:9/ldes", "timestamp_path": "urn:test:t",
                 "poll": 0.5},
    }
    assert {key: written[key] for key in expected} == expected
    r = client.put("/streams/ward?lateness=PT1S&alias=" + ALIAS)  # every transport setting back to its default
    assert r.status_code == 204
    assert r.headers["Warning"] == (
        '299 concentrator "PUT replaced the whole configuration: dead-letter, graph-template, ldes-page, ldes-poll, '
        'ldes-source, ldes-timestamp-path, mqtt-format, mqtt-topic, timestamp-path went back to the default; PATCH '
        'changes the settings it names and keeps the others"')
    written = json.loads((data / "streams" / "ward" / "config.json").read_text())
    assert written["mqtt"] == {"topics": [], "format": "application/trig", "timestamp_path": None,
                               "graph_template": None, "dead_letter": None}
    assert written["ldes"] == {"page": 60_000_000, "source": None, "timestamp_path": None, "poll": 1.0}


def test_the_documented_forms_are_taken_as_query_parameters_and_as_json(tmp_path: Path) -> None:
    config = ServerConfig(tmp_path / "data", in_memory=True)
    client = create_app(config, open_services(config, BROKER)).test_client()
    r = client.put("/streams/a?mqtt-topic=ward/1/hr&mqtt-topic=ward/2/hr&mqtt-format=TEXT/Turtle"
                   "&timestamp-path=urn:test:at&graph-template=urn:x:{topic}/{uuid}&dead-letter=a-bad"
                   "&ldes-page=PT30S&ldes-source=http://127.0.0.1:9/ldes&ldes-timestamp-path=urn:test:t"
                   "&ldes-poll=PT0.25S")
    assert r.status_code == 201, r.text
    body = {"mqtt-topic": ["ward/1/hr", "ward/2/hr"], "mqtt-format": "text/turtle", "timestamp-path": "urn:test:at",
            "graph-template": "urn:x:{topic}/{uuid}", "dead-letter": "a-bad", "ldes-page": "PT30S",
            "ldes-source": "http://127.0.0.1:9/ldes", "ldes-timestamp-path": "urn:test:t", "ldes-poll": "PT0.25S"}
    assert client.put("/streams/b", json=body).status_code == 201
    for name in ("a", "b"):
        described = client.get(f"/streams/{name}").get_json()
        assert described["mqtt"] == {"topics": ["ward/1/hr", "ward/2/hr"], "format": "text/turtle",
                                     "timestamp_path": "urn:test:at", "graph_template": "urn:x:{topic}/{uuid}",
                                     "dead_letter": "a-bad"}
        assert (described["ldes"]["page_us"], described["ldes"]["source"], described["ldes"]["timestamp_path"],
                described["ldes"]["poll_seconds"]) == (30_000_000, "http://127.0.0.1:9/ldes", "urn:test:t", 0.25)
    r = client.put("/streams/b", json=body)
    assert r.status_code == 204 and "Warning" not in r.headers  # read back as given: nothing went to its default


def test_each_block_is_checked_by_its_own_part_before_anything_changes(tmp_path: Path) -> None:
    catalog = StreamCatalog(tmp_path / "streams", in_memory=True)
    try:
        with pytest.raises(StreamSettingInvalid, match="at least a second") as refused:
            catalog.put(StreamConfig("s", ldes=LdesConfig(page=999_999)))
        assert refused.value.status_hint == 400 and catalog.names() == []
        catalog.put(StreamConfig("s", ldes=LdesConfig(page=1_000_000)))
        assert catalog.names() == ["s"]
    finally:
        catalog.close()

    def mqtt(**settings: object) -> StreamConfig:
        return StreamConfig("s", mqtt=MqttConfig(**settings))  # type: ignore[arg-type]

    with pytest.raises(NoBroker, match="serve --mqtt") as no_broker:
        mqtt_in.check_settings(mqtt(topics=["a"]), None)
    assert no_broker.value.status_hint == 409
    mqtt_in.check_settings(mqtt(topics=["a"], format="text/turtle", graph_template="urn:x:{digest}"), BROKER)
    for settings, word in (({"format": "text/csv"}, "mqtt-format"), ({"graph_template": "urn:x:fixed"}, "{uuid}"),
                           ({"dead_letter": "s"}, "own dead-letter")):
        with pytest.raises(ConnectorSettingInvalid, match=word) as invalid:
            mqtt_in.check_settings(mqtt(topics=["a"], **settings), BROKER)
        assert invalid.value.status_hint == 400
    with pytest.raises(InvalidStreamName):
        mqtt_in.check_settings(mqtt(topics=["a"], dead_letter="no spaces"), BROKER)

    def following(**settings: object) -> StreamConfig:
        return StreamConfig("s", ldes=LdesConfig(**settings))  # type: ignore[arg-type]

    ldes.check_settings(following(source="https://example.org/ldes", poll=86_400.0), frozenset({"example.org"}))
    with pytest.raises(ServiceNotAllowed, match="--service-allow") as forbidden:
        ldes.check_settings(following(source="http://192.0.2.1/ldes"), frozenset({"example.org"}))
    assert forbidden.value.status_hint == 403
    for settings, word in (({"source": "ftp://example.org/ldes"}, "http\\(s\\) URL"),
                           ({"source": "http://example.org/ldes", "poll": 0.05}, "every 0.1 s"),
                           ({"poll": 2.0}, "give ldes-source"), ({"timestamp_path": "urn:t"}, "give ldes-source")):
        with pytest.raises(ConnectorSettingInvalid, match=word):
            ldes.check_settings(following(**settings), None)


def test_the_checks_answer_put_and_patch_and_nothing_is_created(tmp_path: Path) -> None:
    client = http_app(ServerConfig(tmp_path / "data", in_memory=True, service_allow=("example.org",))).test_client()
    for query, status, word in (("mqtt-topic=ward/hr", 409, "serve --mqtt"), ("ldes-page=PT0.5S", 400, "PT1S"),
                                ("ldes-source=http://192.0.2.1/ldes", 403, "--service-allow"),
                                ("ldes-poll=PT5S", 400, "give ldes-source")):
        r = client.put(f"/streams/s?{query}")
        assert r.status_code == status and word in r.text, (query, r.text)
    assert client.get("/streams/s").status_code == 404
    assert client.put("/streams/s?ldes-page=PT2S").status_code == 201
    r = client.patch("/streams/s?ldes-page=PT0.5S")
    assert r.status_code == 400 and "PT1S" in r.text
    assert client.get("/streams/s").get_json()["ldes"]["page_us"] == 2_000_000


def test_every_setting_is_documented_where_users_look_for_it() -> None:
    http = (ROOT / "docs" / "http.md").read_text()
    guides = (ROOT / "docs" / "streams.md").read_text() + (ROOT / "docs" / "connectors.md").read_text() + \
        (ROOT / "docs" / "access.md").read_text()
    rows = [line.replace("`", "") for line in guides.splitlines() if line.startswith("| `")]
    for setting in SETTINGS:
        assert f"`{setting.name}`" in http, setting.name
        assert f"`{setting.name}`" in guides or f"`{setting.name}=" in guides, setting.name
        documented = [row for row in rows if setting.name in row.split("|")[1].replace(",", " ").split()]
        if documented:  # a table row gives its default as the list does
            assert any(setting.default in row for row in documented), (setting.name, setting.default, documented)
