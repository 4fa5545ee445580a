"""AMD's ``hami_dra_devices``: cores in percent of the card's compute units (HAMi's ``amd.com/gpucores``), the CU
count as an attribute, the whole card by default; and the slices ``hami dra-driver`` builds from them."""

from __future__ import annotations

from amd_testlib import MI300X, make_backend, plugin_manager

from hami_amd.backend import ATTR_COMPUTE_UNITS
from hami_core.dra.model import CAP_CORES, CAP_MEMORY, CAP_SHARES, MIB, DraCapacity
from hami_core.dra.slices import build_slices
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.types import DeviceInfo

DRIVER = "hami-core-amd.project-hami.io"


def gpu(i: int, *, devcore: int = 304, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{i}", index=i, count=4, devmem=196608, devcore=devcore, type=MI300X, health=health)


def test_hook_hami_dra_devices_amd_cores_are_a_percentage_of_the_cus() -> None:
    backend = make_backend()
    hook = RoutedHooks(plugin_manager(), [backend])
    dev, bare = hook.hami_dra_devices(backend=backend, devices=[gpu(0), gpu(1, devcore=0)])
    assert dev.capacity[CAP_CORES] == DraCapacity(100, default=100, minimum=1)
    assert dev.capacity[CAP_MEMORY].default == 196608 * MIB  # no memory asked: the whole card, HAMi's AMD rule
    assert dev.capacity[CAP_SHARES].value == 4
    assert dev.attributes == {ATTR_COMPUTE_UNITS: 304}
    assert CAP_CORES not in bare.capacity  # no CUs registered: no percentage to book


def test_amd_slices() -> None:
    backend = make_backend()
    devices = RoutedHooks(plugin_manager(), [backend]).hami_dra_devices(
        backend=backend, devices=[gpu(0), gpu(1, health=False)])
    (item,) = build_slices("mi300", "AMD", devices, vendor="amd")
    (entry,) = item["spec"]["devices"]
    assert item["spec"]["driver"] == DRIVER and entry["name"] == "amd-0"
    assert entry["attributes"][f"{DRIVER}/computeUnits"] == {"int": 304}
    assert entry["attributes"][f"{DRIVER}/type"] == {"string": MI300X}
    assert entry["capacity"]["cores"] == {"value": "100", "requestPolicy": {
        "default": "100", "validRange": {"min": "1", "step": "1"}}}
