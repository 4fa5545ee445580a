"""Device health through ``hami_watch_health``: the real gRPC plugin behind a fake kubelet, a MemoryCluster.

A test vendor (``AcmeVendor`` below) answers the node-side hooks; its health watch is a thread fed by the
test (it stands in for a vendor's driver events). What the tests pin down:

* the hook is called once, after discovery, with the discovered devices; ``on_health(id, False)`` makes
  every open ListAndWatch stream re-send the list with that device's replicas ``Unhealthy`` (the others
  stay ``Healthy``), and the registration annotation is rewritten at once, not at the next 30 s pass;
* no implementation: one info line, every device Healthy; a hook that raises or returns a watch without
  ``stop()``: an error line and the plugin still registers and serves;
* ``stop()`` stops the watch and no watch thread is left; a kubelet restart keeps an unhealthy device
  unhealthy (HAMi's NVIDIA watch never reports recovery); a watch that reports ``healthy=True`` brings the
  device back; an id that was not discovered is ignored with a warning.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from hami_core import hookimpl
from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.deviceplugin.v1beta1 import api_pb2 as pb
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import ContainerAllocation, DeviceBackend, DeviceInfo, ResourceNames
from hami_core.testing.fake_kubelet import FakeKubelet, PluginClient, running_kubelet
from hami_core.wire import keys
from hami_core.wire.nodes import decode_node_devices_json

NODE = "node1"
GPU_A = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
GPU_B = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
REGISTER = "hami.io/node-acme-register"
BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"),
                        register_annotation=REGISTER, to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE,
                        lock_annotation=keys.NODE_LOCK)
WATCH_THREAD = "acme-health"
STREAM_DEADLINE_S = 20.0  # a bound on a broken test, never an expectation of speed


class FeedWatch:
    """The test vendor's health watch: a thread that passes what the test feeds it to ``on_health``."""

    def __init__(self, on_health: Callable[[str, bool], None]) -> None:
        self.on_health = on_health
        self.feed: queue.Queue[tuple[str, bool] | None] = queue.Queue()
        self.stops = 0
        self.thread = threading.Thread(target=self._run, name=WATCH_THREAD, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.feed.get()) is not None:
            self.on_health(*item)

    def stop(self) -> None:
        self.stops += 1
        self.feed.put(None)
        self.thread.join(5.0)


class AcmeVendor:
    """Node-side hooks of a test vendor; ``watch`` selects what ``hami_watch_health`` does."""

    def __init__(self, watch: str = "feed", devices: Sequence[DeviceInfo] | None = None) -> None:
        self.watch = watch
        self.devices = list(devices) if devices is not None else [
            DeviceInfo(id=GPU_A, index=0, count=2, devmem=8000, devcore=100, type="ACME-X", health=True),
            DeviceInfo(id=GPU_B, index=1, count=2, devmem=8000, devcore=100, type="ACME-X", health=True)]
        self.calls: list[dict[str, Any]] = []
        self.watches: list[FeedWatch] = []

    @hookimpl
    def hami_discover_devices(self, backend):
        return list(self.devices)

    @hookimpl
    def hami_allocate(self, backend, pod, container_index, devices):
        return ContainerAllocation(env={"ACME_VISIBLE": ",".join(d.uuid for d in devices)})


class WatchingVendor(AcmeVendor):
    @hookimpl
    def hami_watch_health(self, backend, devices, on_health):
        self.calls.append({"backend": backend, "devices": list(devices), "on_health": on_health})
        if self.watch == "raise":
            raise RuntimeError("driver event API unavailable")
        if self.watch == "no-stop":
            return object()
        w = FeedWatch(on_health)
        self.watches.append(w)
        return w


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with running_kubelet("hhw") as k:
        yield k


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {}}}])


@pytest.fixture
def make_app(kubelet: FakeKubelet, cluster: MemoryCluster) -> Iterator[Callable[[AcmeVendor], DevicePluginApp]]:
    apps: list[DevicePluginApp] = []

    def make(vendor: AcmeVendor) -> DevicePluginApp:
        pm = get_plugin_manager(load_entrypoints=False, plugins=[vendor])
        # A one-hour pass: a registration rewrite seen in a test can only come from the health change.
        app = DevicePluginApp(pm, BACKEND, cluster, NODE, plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05,
                              register_interval_s=3600)
        apps.append(app)
        app.start()
        return app

    yield make
    for app in apps:
        app.stop()


def watch(client: PluginClient) -> Any:
    """ListAndWatch with a deadline, so a missing re-send fails the test instead of hanging it."""
    return client.stub.ListAndWatch(pb.Empty(), timeout=STREAM_DEADLINE_S)


def health_of(response: Any) -> dict[str, str]:
    return {d.ID: d.health for d in response.devices}


def registered(cluster: MemoryCluster) -> str | None:
    return (cluster.get_node(NODE)["metadata"].get("annotations") or {}).get(REGISTER)


def wait_for_registration(cluster: MemoryCluster, predicate: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + STREAM_DEADLINE_S
    while True:
        value = registered(cluster)
        if value is not None and predicate(value):
            return value
        assert time.monotonic() < deadline, f"registration never matched; last value {value!r}"
        time.sleep(0.02)


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WATCH_THREAD]


def test_hook_hami_watch_health(make_app, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    vendor = WatchingVendor()
    app = make_app(vendor)
    (call,) = vendor.calls  # once, after discovery, with what discovery found
    assert call["backend"] == BACKEND
    assert [d.id for d in call["devices"]] == [GPU_A, GPU_B]
    (feed,) = vendor.watches
    assert app.health_watch is feed
    first_write = wait_for_registration(cluster, lambda v: True)
    assert [d.health for d in decode_node_devices_json(first_write)] == [True, True]

    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        stream = watch(client)
        assert set(health_of(next(stream)).values()) == {"Healthy"}
        feed.feed.put((GPU_B, False))
        assert health_of(next(stream)) == {f"{GPU_A}-0": "Healthy", f"{GPU_A}-1": "Healthy",
                                           f"{GPU_B}-0": "Unhealthy", f"{GPU_B}-1": "Unhealthy"}
        stream.cancel()
    # Pushed at once (the pass interval is an hour); Go's omitempty drops "health":false from GPU_B's entry.
    value = wait_for_registration(cluster, lambda v: v != first_write)
    assert {d.id: d.health for d in decode_node_devices_json(value)} == {GPU_A: True, GPU_B: False}
    assert value.count('"health":true') == 1

    app.stop()
    assert feed.stops == 1 and not feed.thread.is_alive() and watch_threads() == []
    assert app.health_watch is None


def test_every_open_stream_resends_and_health_survives_a_kubelet_restart(make_app, kubelet: FakeKubelet) -> None:
    vendor = WatchingVendor()
    make_app(vendor)
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as one, kubelet.connect(reg.endpoint) as two:
        s1, s2 = watch(one), watch(two)
        next(s1), next(s2)
        vendor.watches[0].feed.put((GPU_A, False))
        for s in (s1, s2):
            health = health_of(next(s))
            assert health[f"{GPU_A}-0"] == health[f"{GPU_A}-1"] == "Unhealthy"
            assert health[f"{GPU_B}-0"] == "Healthy"
    kubelet.restart()  # the plugin serves and registers again; the device stays unhealthy
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        stream = watch(client)
        assert health_of(next(stream))[f"{GPU_A}-0"] == "Unhealthy"
        stream.cancel()
    assert len(vendor.calls) == 1  # a restart does not start a second watch


def test_a_device_can_come_back_and_unknown_ids_are_ignored(make_app, kubelet: FakeKubelet,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    vendor = WatchingVendor()
    make_app(vendor)
    feed = vendor.watches[0].feed
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client, caplog.at_level(logging.WARNING, logger="hami.node"):
        stream = watch(client)
        next(stream)
        feed.put(("GPU-not-on-this-node", False))
        feed.put((GPU_B, False))
        # The unknown id caused no re-send: the first one already carries GPU_B's change, and no stray device.
        assert health_of(next(stream)) == {f"{GPU_A}-0": "Healthy", f"{GPU_A}-1": "Healthy",
                                           f"{GPU_B}-0": "Unhealthy", f"{GPU_B}-1": "Unhealthy"}
        feed.put((GPU_B, True))
        assert set(health_of(next(stream)).values()) == {"Healthy"}
        stream.cancel()
    assert "backend ACME: health report for unknown device 'GPU-not-on-this-node' ignored" in caplog.messages


def test_no_implementation_one_info_line_every_device_healthy(make_app, kubelet: FakeKubelet,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="hami.node"):
        app = make_app(AcmeVendor())
    lines = [r for r in caplog.records if "health watch" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.INFO, "backend ACME: no device health watch; every device stays Healthy")]
    assert app.health_watch is None
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        stream = watch(client)
        assert set(health_of(next(stream)).values()) == {"Healthy"}
        stream.cancel()


def test_hook_that_raises_is_logged_and_the_plugin_still_serves(make_app, kubelet: FakeKubelet,
                                                                cluster: MemoryCluster,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    vendor = WatchingVendor("raise")
    with caplog.at_level(logging.INFO, logger="hami.node"):
        app = make_app(vendor)
    assert len(vendor.calls) == 1 and app.health_watch is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["backend ACME: the device health watch failed to start (RuntimeError: driver event API "
                      "unavailable); serving with health checks off, every device stays Healthy"]
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        stream = watch(client)
        assert set(health_of(next(stream)).values()) == {"Healthy"}
        stream.cancel()
        assert client.options().get_preferred_allocation_available
    value = wait_for_registration(cluster, lambda v: True)
    assert [d.health for d in decode_node_devices_json(value)] == [True, True]
    app.stop()
    assert not app.server.socket_path.exists()


def test_watch_without_stop_is_an_error_and_the_plugin_still_serves(make_app, kubelet: FakeKubelet,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="hami.node"):
        app = make_app(WatchingVendor("no-stop"))
    assert app.health_watch is None
    assert any("hami_watch_health returned" in r.getMessage() and "no stop()" in r.getMessage()
               for r in caplog.records)
    assert kubelet.next_registration().resource_name == "acme.com/gpu"
    app.stop()


def test_watch_whose_stop_raises_does_not_keep_the_plugin_running(make_app, kubelet: FakeKubelet,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    vendor = WatchingVendor()
    app = make_app(vendor)
    feed = vendor.watches[0]
    real_stop = feed.stop

    def broken_stop() -> None:
        real_stop()
        raise RuntimeError("event set already freed")

    feed.stop = broken_stop  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="hami.node"):
        app.stop()
    assert any("stopping the health watch failed: event set already freed" in r.getMessage()
               for r in caplog.records)
    assert not app.server.socket_path.exists()
    assert all(not t.is_alive() for t in app._threads)


def test_no_devices_no_watch(make_app) -> None:
    vendor = WatchingVendor(devices=[])
    app = make_app(vendor)
    assert vendor.calls == [] and app.health_watch is None and watch_threads() == []
