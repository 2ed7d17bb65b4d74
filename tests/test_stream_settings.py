"""Changing one stream setting (issue 34): ``PATCH /streams/NAME?setting=…`` changes the settings it names and keeps
the others; a ``PUT``, which replaces the whole configuration, says in a ``Warning`` which settings it sent back to
their default. The values are worked out from the requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from concentrator.compose import http_app
from protocol import ServerConfig

AUTH = {"Authorization": "Bearer k"}


@pytest.fixture
def c(tmp_path: Path) -> FlaskClient:
    client = http_app(ServerConfig(tmp_path / "data", in_memory=True)).test_client()
    r = client.put("/streams/hr?lateness=PT5S&alias=urn:uuid:6f1c0e3a-0000-4000-8000-000000000001&ldes-page=PT2M"
                   "&write-token=k")
    assert r.status_code == 201 and "Warning" not in r.headers
    return client


def settings(c: FlaskClient) -> tuple[object, ...]:
    d = c.get("/streams/hr").get_json()
    return d["lateness_us"], d["retention_us"], d["aliases"], d["ldes"]["page_us"], d["write_token"]


def test_patch_changes_one_setting_and_keeps_the_others(c: FlaskClient) -> None:
    assert c.patch("/streams/hr?retention=PT1H").status_code == 401  # the stream's token
    r = c.patch("/streams/hr?retention=PT1H", headers=AUTH)
    assert r.status_code == 204, r.text
    alias = ["urn:uuid:6f1c0e3a-0000-4000-8000-000000000001"]
    assert settings(c) == (5_000_000, 3_600_000_000, alias, 120_000_000, True)
    assert c.patch("/streams/hr", json={"lateness": "PT0.25S"}, headers=AUTH).status_code == 204  # a JSON body
    assert settings(c) == (250_000, 3_600_000_000, alias, 120_000_000, True)
    assert c.patch("/streams/hr?alias=", headers=AUTH).status_code == 204  # given empty: back to the default
    assert settings(c) == (250_000, 3_600_000_000, [], 120_000_000, True)


def test_a_refused_patch_changes_nothing(c: FlaskClient) -> None:
    before = settings(c)
    r = c.patch("/streams/hr?retention=PT1H&lateness=soon", headers=AUTH)
    assert r.status_code == 400 and "lateness='soon'" in r.text
    assert settings(c) == before
    assert c.patch("/streams/nope?retention=PT1H").status_code == 404


def test_a_put_that_drops_settings_says_which(c: FlaskClient) -> None:
    r = c.put("/streams/hr?ldes-page=PT1M", headers=AUTH)
    assert r.status_code == 204
    assert r.headers["Warning"] == ('299 concentrator "PUT replaced the whole configuration: alias, lateness, '
                                    'ldes-page went back to the default; PATCH changes the settings it names and '
                                    'keeps the others"')
    assert settings(c) == (0, None, [], 60_000_000, True)  # the write token is kept unless given
    r = c.put("/streams/hr?ldes-page=PT1M", headers=AUTH)
    assert r.status_code == 204 and "Warning" not in r.headers  # the same configuration again: nothing dropped
