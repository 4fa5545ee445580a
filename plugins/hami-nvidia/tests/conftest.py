"""Node-side fixtures for the hami-nvidia tests: the in-test kubelet and the in-memory cluster.

The helper modules (``nvidia_testlib``, ``nvml_testlib``, ...) live next to this file and are importable through
the root configuration's ``pythonpath``; ``clock`` comes from the hami-core test kit.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nvml_testlib import NODE

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.fake_kubelet import FakeKubelet, running_kubelet


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    """The in-test kubelet stand-in (hami_core.node.fake_kubelet) on a temporary plugin directory."""
    with running_kubelet("hnv") as k:
        yield k


@pytest.fixture
def cluster() -> MemoryCluster:
    """An in-memory cluster holding the node the device plugin runs on (:data:`nvml_testlib.NODE`)."""
    return MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {}}}])
