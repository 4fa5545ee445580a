"""The sGPU backend's memory: the jittery QoS cache (qos_test.go) and the pod classes per device."""

from __future__ import annotations

import pytest

from hami_metax.state import JitteryQosCache, PodClasses

REGISTERED = [("GPU-123", "best-effort"), ("GPU-456", "best-effort"), ("GPU-789", "best-effort")]


@pytest.mark.parametrize(("cache", "expected"), [
    ({"GPU-123": "fixed-share", "GPU-789": "burst-share"}, {"GPU-123": "fixed-share", "GPU-789": "burst-share"}),
    ({"GPU-123": "best-effort", "GPU-789": "burst-share"}, {"GPU-789": "burst-share"}),
    ({"GPU-123": "best-effort", "GPU-789": "best-effort"}, {}),
])
def test_sync_drops_confirmed_entries(cache: dict, expected: dict) -> None:
    jq = JitteryQosCache()
    for uuid, qos in cache.items():
        jq.add(uuid, qos)
    jq.sync(REGISTERED)
    assert jq.snapshot() == expected


def test_get() -> None:
    jq = JitteryQosCache()
    jq.add("GPU-123", "fixed-share")
    jq.add("GPU-789", "burst-share")
    assert jq.get("GPU-789") == "burst-share"
    assert jq.get("GPU-000") is None
    jq.add("GPU-789", "")
    assert jq.get("GPU-789") == ""


def test_pod_classes_count_per_device() -> None:
    pods = PodClasses()
    pods.record("ns/on1", "online", ["GPU-1", "GPU-2"])
    pods.record("ns/on2", "online", ["GPU-1"])
    pods.record("ns/off", "offline", ["GPU-1"])
    pods.record("ns/normal", "", ["GPU-3"])
    assert pods.counts("GPU-1") == (2, 1)
    assert pods.counts("GPU-1", exclude="ns/on2") == (1, 1)
    assert pods.counts("GPU-2") == (1, 0)
    assert pods.counts("GPU-3") == (0, 0)
    assert pods.pods_on("GPU-3") == frozenset({"ns/normal"})
    # Re-recording replaces the pod's devices and class.
    pods.record("ns/on1", "offline", ["GPU-2"])
    assert (pods.counts("GPU-1"), pods.counts("GPU-2")) == ((1, 1), (0, 1))
    pods.discard("ns/on1")
    assert pods.counts("GPU-2") == (0, 0)
    assert len(pods) == 3


def test_forget_device_drops_stale_entries() -> None:
    pods = PodClasses()
    pods.record("a", "online", ["GPU-1", "GPU-2"])
    pods.record("b", "offline", ["GPU-1"])
    pods.record("me", "online", ["GPU-1"])
    pods.forget_device("GPU-1", keep="me")
    assert pods.pods_on("GPU-1") == frozenset({"me"})
    assert pods.counts("GPU-2") == (1, 0)
    assert len(pods) == 2   # "b" held nothing else
    pods.record("c", "", [])
    assert len(pods) == 2
