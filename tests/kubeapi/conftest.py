"""Fixtures: a fake API server and the official client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubeapi.fake_apiserver import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        yield srv


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[Any]:
    from kubernetes import client

    cfg = client.Configuration(host=server.url)
    api = client.ApiClient(cfg)
    yield api
    api.close()
