"""Fixtures: a MemoryCluster with NVIDIA nodes and the real scheduler service on 127.0.0.1 (ephemeral ports)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sched_helpers import make_engine, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])


@pytest.fixture
def service(cluster: MemoryCluster) -> Iterator[Scheduler]:
    # per-device metrics on: the tests read HAMi's per-device series (off by default, --metrics-device-detail)
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host="127.0.0.1",
                                                     metrics_port=0, sync_wait_s=2.0, metrics_device_detail=True))
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()
