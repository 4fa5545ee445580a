"""NVIDIA XID health checks (spec node.md §2.11), end to end and unit by unit, against a fake driver.

``fakedriver/pynvml.py`` stands in for the NVIDIA driver as pynvml shows it (ctypes handles included). The
end-to-end tests run ``hami device-plugin``'s app with the installed hami-nvidia hooks: GPUs are discovered by
the real NVML probe child (which imports the fake through ``PYTHONPATH``), the XID watcher runs in this
process on the same fake, and a fake kubelet reads ListAndWatch over real gRPC (kubelet v1beta1 protobuf).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from nvml_testlib import NODE, device_plugins, load_fake_pynvml

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.deviceplugin.v1beta1 import api_pb2 as pb
from hami_core.node.fake_kubelet import FakeKubelet
from hami_core.plugins.types import DeviceInfo
from hami_core.wire import keys
from hami_core.wire.nodes import decode_node_devices_json
from hami_nvidia import detect
from hami_nvidia.filehealth import DevicesFileHealth
from hami_nvidia.node import IGNORED_XIDS, XidHealthWatcher, watch_health

UUID0 = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
UUID1 = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
UUID2 = "GPU-2b2c2d2e-0000-1111-2222-333344445555"
UUIDS = [UUID0, UUID1, UUID2]
XID_THREAD = "hami-nvidia-xid"
DEADLINE_S = 20.0  # bounds a broken test; never an expectation of speed
XID_EVENTS = 0x8 | 0x2 | 0x1  # XidCriticalError | DoubleBitEcc | SingleBitEcc


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The fake driver, importable as ``pynvml`` here and in the discovery child, with three H200s."""
    for var in (detect.OVERRIDE_ENV, "DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"):
        monkeypatch.delenv(var, raising=False)
    return load_fake_pynvml(monkeypatch, [{"uuid": u, "name": "NVIDIA H200", "memory_mib": 143771} for u in UUIDS])


@pytest.fixture
def start_plugin(kubelet: FakeKubelet, cluster: MemoryCluster) -> Iterator[Callable[[], DevicePluginApp]]:
    with device_plugins(kubelet, cluster, NODE, {"deviceSplitCount": 2}) as start:
        yield start


def list_and_watch(kubelet: FakeKubelet) -> tuple[Any, Any]:
    reg = kubelet.next_registration()
    client = kubelet.connect(reg.endpoint)
    return client, client.stub.ListAndWatch(pb.Empty(), timeout=DEADLINE_S)


def health_by_gpu(response: Any) -> dict[str, set[str]]:
    """``{uuid: {health of each replica}}`` of one ListAndWatch message."""
    out: dict[str, set[str]] = {}
    for d in response.devices:
        out.setdefault(d.ID.rsplit("-", 1)[0], set()).add(d.health)
    return out


def registration(cluster: MemoryCluster, predicate: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = (cluster.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_NVIDIA_REGISTER)
        if value is not None and predicate(value):
            return value
        assert time.monotonic() < deadline, f"registration never matched; last value {value!r}"
        time.sleep(0.02)


def xid_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == XID_THREAD and t.is_alive()]


# ------------------------------------------------------------------------------------------ end to end
def test_xid_79_marks_that_gpu_unhealthy_on_the_stream_and_in_the_registration(
        nvml: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    app = start_plugin()
    assert [d.id for d in app.devices] == UUIDS  # discovered by the NVML probe child, through the fake
    first = registration(cluster, lambda v: True)
    client, stream = list_and_watch(kubelet)
    with client:
        assert health_by_gpu(next(stream)) == {u: {"Healthy"} for u in UUIDS}
        nvml.emit_xid(UUID0, 13)  # application error: ignored
        nvml.emit_xid(UUID2, 0, nvml.nvmlEventTypeSingleBitEccError)  # not an XID event: ignored
        nvml.emit_xid(UUID1, 79)  # GPU has fallen off the bus
        # Events are handled in order, so the first re-send already shows whether 13 or the ECC did anything.
        assert health_by_gpu(next(stream)) == {UUID0: {"Healthy"}, UUID1: {"Unhealthy"}, UUID2: {"Healthy"}}
        stream.cancel()
    value = registration(cluster, lambda v: v != first)  # pushed at once: the pass interval is an hour
    assert {d.id: d.health for d in decode_node_devices_json(value)} == {UUID0: True, UUID1: False, UUID2: True}
    assert nvml.driver().registered == dict.fromkeys(UUIDS, XID_EVENTS)


def test_event_wait_failure_marks_every_gpu_unhealthy(nvml: ModuleType, start_plugin,
                                                      kubelet: FakeKubelet) -> None:
    start_plugin()
    client, stream = list_and_watch(kubelet)
    with client:
        assert health_by_gpu(next(stream)) == {u: {"Healthy"} for u in UUIDS}
        nvml.fail_wait(nvml.NVMLError_GpuIsLost())
        seen = []
        while not seen or seen[-1] != {u: {"Unhealthy"} for u in UUIDS}:
            seen.append(health_by_gpu(next(stream)))  # one re-send per GPU turning unhealthy
        assert len(seen) <= len(UUIDS)
        stream.cancel()


def test_disable_healthchecks_all_starts_no_watcher(nvml: ModuleType, start_plugin, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("DP_DISABLE_HEALTHCHECKS", "all")
    with caplog.at_level(logging.INFO):
        app = start_plugin()
    assert len(app.devices) == 3 and app.health_watch is None and xid_threads() == []
    assert nvml.driver().inits == 0  # NVML never opened in the plugin process
    assert "XID health checks disabled (DP_DISABLE_HEALTHCHECKS=all)" in caplog.messages
    assert "backend NVIDIA: no device health watch; every device stays Healthy" in caplog.messages


def test_devices_file_health_is_followed_without_nvml(nvml: ModuleType, start_plugin, kubelet: FakeKubelet,
                                                     cluster: MemoryCluster, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Fake GPUs have no NVML: their health is the devices file's ``health`` field, re-read on change; kubelet
    (ListAndWatch) and the registration annotation follow it both ways."""
    devices = tmp_path / "devices.yaml"
    devices.write_text(f"devices:\n  - {{uuid: {UUID0}, model: NVIDIA A100, memory: 40960}}\n"
                       f"  - {{uuid: {UUID1}, model: NVIDIA A100, memory: 40960}}\n")
    monkeypatch.setenv(detect.OVERRIDE_ENV, str(devices))
    with caplog.at_level(logging.INFO):
        app = start_plugin()
    assert [d.id for d in app.devices] == [UUID0, UUID1] and xid_threads() == []
    assert isinstance(app.health_watch, DevicesFileHealth)
    assert nvml.driver().inits == 0
    assert f"GPUs come from the devices file {devices} (fake GPUs, no NVML): health from its 'health' fields" \
        in caplog.messages
    _, stream = list_and_watch(kubelet)
    assert health_by_gpu(next(stream)) == {UUID0: {"Healthy"}, UUID1: {"Healthy"}}
    devices.write_text(f"devices:\n  - {{uuid: {UUID0}, model: NVIDIA A100, memory: 40960, health: false}}\n"
                       f"  - {{uuid: {UUID1}, model: NVIDIA A100, memory: 40960}}\n")
    assert health_by_gpu(next(stream)) == {UUID0: {"Unhealthy"}, UUID1: {"Healthy"}}
    registration(cluster, lambda v: {d.id: d.health for d in decode_node_devices_json(v)} ==
                 {UUID0: False, UUID1: True})
    devices.write_text(f"devices:\n  - {{uuid: {UUID0}, model: NVIDIA A100, memory: 40960, health: 'true'}}\n"
                       f"  - {{uuid: {UUID1}, model: NVIDIA A100, memory: 40960}}\n")
    assert health_by_gpu(next(stream)) == {UUID0: {"Healthy"}, UUID1: {"Healthy"}}
    stream.cancel()


def test_stop_ends_the_watcher_thread_and_releases_nvml(nvml: ModuleType, start_plugin) -> None:
    app = start_plugin()
    watcher = app.health_watch
    assert isinstance(watcher, XidHealthWatcher)
    assert nvml.driver().waiting.wait(DEADLINE_S)  # the watcher is armed: NVML opened, events registered
    assert xid_threads() != []
    app.stop()
    assert xid_threads() == [] and not watcher.running
    drv = nvml.driver()
    assert (drv.inits, drv.shutdowns, drv.sets_freed) == (1, 1, 1)


# ------------------------------------------------------------------------------------------ the watcher
def run_watcher(nvml: ModuleType, uuids: list[str], events: Callable[[], None], *,
                ignored: frozenset[int] = IGNORED_XIDS) -> list[str]:
    """Start a watcher, inject ``events``, wait until it handled them all, stop it; what turned unhealthy."""
    marked: list[str] = []
    w = XidHealthWatcher(nvml, uuids, marked.append, ignored=ignored)
    w.start()
    try:
        events()
        assert nvml.settle(DEADLINE_S)
    finally:
        w.stop()
    assert not w.running
    return marked


def test_ignored_and_non_xid_events_change_nothing(nvml: ModuleType) -> None:
    def events() -> None:
        for xid in sorted(IGNORED_XIDS):
            nvml.emit_xid(UUID0, xid)
        nvml.emit_xid(UUID0, 0, nvml.nvmlEventTypeDoubleBitEccError)

    assert run_watcher(nvml, [UUID0, UUID1], events) == []


def test_critical_xids_mark_their_gpu_only(nvml: ModuleType) -> None:
    def events() -> None:
        nvml.emit_xid(UUID1, 79)
        nvml.emit_xid(UUID2, 79)  # a GPU this plugin does not serve: ignored
        nvml.emit_xid(UUID0, 48)  # double-bit ECC error, reported as XID 48

    assert run_watcher(nvml, [UUID0, UUID1], events) == [UUID1, UUID0]


def test_xid_on_a_gpu_the_driver_cannot_name_marks_every_gpu(nvml: ModuleType) -> None:
    assert run_watcher(nvml, [UUID0, UUID1], lambda: nvml.emit_unknown_device_xid(79)) == [UUID0, UUID1]


def test_disable_healthchecks_lists_more_ignored_xids(nvml: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DP_DISABLE_HEALTHCHECKS", "48")
    monkeypatch.setenv("DP_ENABLE_HEALTHCHECKS", "13")
    marked: list[tuple[str, bool]] = []
    w = watch_health([DeviceInfo(id=u) for u in (UUID0, UUID1)], lambda u, h: marked.append((u, h)))
    assert isinstance(w, XidHealthWatcher)
    try:
        assert w.ignored == (IGNORED_XIDS | {48}) - {13}
        nvml.emit_xid(UUID0, 48)
        nvml.emit_xid(UUID1, 13)  # re-enabled: an unhealthy GPU now
        assert nvml.settle(DEADLINE_S)
    finally:
        w.stop()
    assert marked == [(UUID1, False)]


def test_registration_failure_marks_that_gpu_and_too_old_gpus_stay_healthy(nvml: ModuleType) -> None:
    drv = nvml.driver()
    drv.register_errors[UUID0] = nvml.NVMLError("Unknown Error")
    drv.register_errors[UUID1] = nvml.NVMLError_NotSupported()
    assert run_watcher(nvml, [UUID0, UUID1, UUID2], lambda: None) == [UUID0]
    assert drv.registered == {UUID2: XID_EVENTS}


def test_nvml_init_failure_leaves_gpus_healthy(nvml: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    def broken_init() -> None:
        raise nvml.NVMLError("Driver Not Loaded")

    monkeypatch.setattr(nvml, "nvmlInit", broken_init)
    marked: list[str] = []
    w = XidHealthWatcher(nvml, [UUID0], marked.append)
    with caplog.at_level(logging.ERROR):
        w.start()
        w.stop()
    assert marked == [] and not w.running
    assert "NVML health checks unavailable, every GPU stays Healthy: Driver Not Loaded" in caplog.messages


def test_no_pynvml_no_watcher(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for var in (detect.OVERRIDE_ENV, "DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` sees when it is not installed
    with caplog.at_level(logging.WARNING):
        assert watch_health([DeviceInfo(id=UUID0)], lambda u, h: None) is None
    assert "pynvml (nvidia-ml-py) is not installed: no XID health checks" in caplog.messages


def test_hook_answers_only_for_nvidia(nvml: ModuleType) -> None:
    # The watch is a method of the NVIDIA backend: the core's relay never asks it for another backend.
    from nvidia_testlib import make_backend, plugin_manager

    from hami_core.plugins.relay import RoutedHooks
    from hami_core.plugins.types import DeviceBackend, ResourceNames

    other = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"))
    hooks = RoutedHooks(plugin_manager(), [make_backend(), other])
    assert hooks.hami_watch_health(backend=other, devices=[DeviceInfo(id=UUID0)],
                                   on_health=lambda u, h: None) is None
