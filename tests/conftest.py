from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from protocol import ServerConfig, create_app
from store import RevisionedDataset


@pytest.fixture
def dataset(tmp_path: Path) -> Iterator[RevisionedDataset]:
    """An on-disk dataset in a fresh directory."""
    ds = RevisionedDataset(tmp_path / "data")
    yield ds
    ds.close()


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    config = ServerConfig(tmp_path / "data", max_body_bytes=1_000_000)
    return create_app(config)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
