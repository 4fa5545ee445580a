"""Fixtures: a fake API server and the official client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubeapi.fake_apiserver import FakeApiServer

from hami_core.cluster.kube import KubeCluster


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


@pytest.fixture
def kc(api_client: Any) -> Iterator[KubeCluster]:
    """A KubeCluster on the fake API server: no rate limit, short timeouts and backoff."""
    cluster = KubeCluster(api_client=api_client, qps=0, sync_timeout_s=5, backoff_initial_s=0.05,
                          request_timeout_s=5)
    yield cluster
    cluster.close()
