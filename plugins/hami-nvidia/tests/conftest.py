"""Shared fixtures for the hami-nvidia tests.

The helper functions live in ``nvidia_testlib`` next to this file (pytest runs with
``--import-mode=importlib``, where test modules cannot import a conftest); this conftest puts the folder
on ``sys.path`` and offers the fixtures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from collections.abc import Iterator

from nvidia_testlib import T0, Clock
from nvml_testlib import NODE

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.fake_kubelet import FakeKubelet, running_kubelet


@pytest.fixture
def clock() -> Clock:
    """A fake engine clock at :data:`T0`; advance it with ``clock.now += seconds``."""
    return Clock(T0)


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    """The in-test kubelet stand-in (hami_core.node.fake_kubelet) on a temporary plugin directory."""
    with running_kubelet("hnv") as k:
        yield k


@pytest.fixture
def cluster() -> MemoryCluster:
    """An in-memory cluster holding the node the device plugin runs on (:data:`nvml_testlib.NODE`)."""
    return MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {}}}])
