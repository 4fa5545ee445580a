"""NVIDIA's ``hami_dra_devices``: its mode on every device, defaultCores/defaultMemory as the claim defaults, MIG-mode
cards published whole-card-only; and the slices ``hami dra-driver`` builds from them."""

from __future__ import annotations

from nvidia_testlib import make_backend, plugin_manager

from hami_core.dra.driver import describe
from hami_core.dra.model import CAP_CORES, CAP_MEMORY, CAP_SHARES, MIB, DraCapacity
from hami_core.dra.slices import build_slices
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.types import DeviceInfo


def gpu(i: int, *, mode: str = "hami-core", count: int = 10, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{i}", index=i, count=count, devmem=40960, devcore=100, type="NVIDIA-A100", numa=i,
                      mode=mode, health=health)


def hook_for(backend):  # type: ignore[no-untyped-def]
    return RoutedHooks(plugin_manager(), [backend])


def test_hook_hami_dra_devices_nvidia_modes_and_defaults() -> None:
    backend = make_backend(defaultCores=20, defaultMemory=2048)
    got = hook_for(backend).hami_dra_devices(backend=backend, devices=[gpu(0), gpu(1, mode="mps"), gpu(2, mode="")])
    assert [(d.name, d.mode, d.shared) for d in got] == [("gpu-0", "hami-core", True), ("gpu-1", "mps", True),
                                                         ("gpu-2", "hami-core", True)]
    assert got[0].capacity[CAP_MEMORY] == DraCapacity(40960 * MIB, default=2048 * MIB, minimum=MIB, step=MIB)
    assert got[0].capacity[CAP_CORES].default == 20
    assert got[0].capacity[CAP_SHARES].value == 10


def test_without_default_memory_a_claim_takes_the_whole_card() -> None:
    backend = make_backend()
    (dev,) = hook_for(backend).hami_dra_devices(backend=backend, devices=[gpu(0)])
    assert dev.capacity[CAP_MEMORY].default == 40960 * MIB and dev.capacity[CAP_CORES].default == 0


def test_mig_mode_cards_are_not_shared() -> None:
    backend = make_backend()
    (dev,) = hook_for(backend).hami_dra_devices(backend=backend, devices=[gpu(0, mode="mig", count=7)])
    assert dev.mode == "mig" and not dev.shared and CAP_SHARES not in dev.capacity
    (entry,) = build_slices("n", "NVIDIA", [dev], vendor="nvidia")[0]["spec"]["devices"]
    assert "allowMultipleAllocations" not in entry
    assert all("requestPolicy" not in cap for cap in entry["capacity"].values())
    assert entry["attributes"]["hami-core-gpu.project-hami.io/mode"] == {"string": "mig"}


def test_the_driver_uses_the_override_and_withdraws_unhealthy_cards() -> None:
    backend = make_backend()
    hook = hook_for(backend)
    devices = describe(hook, backend, [gpu(0), gpu(1, health=False)])
    assert [d.healthy for d in devices] == [True, False]
    (item,) = build_slices("n", "NVIDIA", devices, vendor="nvidia")
    assert [d["name"] for d in item["spec"]["devices"]] == ["gpu-0"]
    assert item["spec"]["driver"] == "hami-core-gpu.project-hami.io"
