"""ResourceSlices and DeviceClasses from DraDevices: the shape resource.k8s.io/v1 takes, the limits it sets, and the
plan that bumps a pool's generation only on change."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_core import hookimpl
from hami_core.dra.deviceclass import device_class, device_classes, selector_expression
from hami_core.dra.model import (
    CAP_CORES,
    CAP_MEMORY,
    CAP_SHARES,
    MIB,
    DraCapacity,
    DraDevice,
    device_class_name,
    driver_name,
)
from hami_core.dra.slices import (
    MAX_DEVICES_PER_SLICE,
    MAX_NAME,
    SliceError,
    build_slices,
    canonical,
    plan,
    slice_name,
)
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.standard import StandardBackend, standard_dra_devices
from hami_core.plugins.types import DeviceBackend, DeviceInfo, ResourceNames

NVIDIA = driver_name("NVIDIA")


def info(i: int, *, count: int = 10, mem: int = 81920, health: bool = True, mode: str = "hami-core") -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{i:04d}", index=i, count=count, devmem=mem, devcore=100, type="NVIDIA-A100",
                      numa=i % 2, mode=mode, health=health)


def backend(name: str = "NVIDIA") -> StandardBackend:
    return StandardBackend(name=name, vendor=name.lower(), resource_names=ResourceNames(f"{name.lower()}.com/gpu"))


def devices(n: int = 2, **kw: Any) -> list[DraDevice]:
    return standard_dra_devices(backend(), [info(i, **kw) for i in range(n)])


# ------------------------------------------------------------------------------------------ the hook

def test_hook_hami_dra_devices() -> None:
    """The base class answers the hook for its own backend: memory in bytes, cores, shares, unhealthy marked."""
    b = backend()
    hook = RoutedHooks(get_plugin_manager(load_entrypoints=False), [b])
    got = hook.hami_dra_devices(backend=b, devices=[info(1, health=False), info(0, count=4)])
    assert [(d.index, d.uuid, d.healthy, d.shared) for d in got] == [(0, "GPU-0000", True, True),
                                                                      (1, "GPU-0001", False, True)]
    first = got[0]
    assert first.capacity[CAP_MEMORY] == DraCapacity(81920 * MIB, default=81920 * MIB, minimum=MIB, step=MIB)
    assert first.capacity[CAP_CORES] == DraCapacity(100, default=0, minimum=0)
    assert first.capacity[CAP_SHARES] == DraCapacity(4, default=1, minimum=1, maximum=1)
    assert (first.name, first.driver, first.mode) == ("gpu-0", NVIDIA, "hami-core")


def test_a_single_slot_device_is_not_shared() -> None:
    (dev,) = standard_dra_devices(backend(), [info(0, count=1)])
    assert not dev.shared and CAP_SHARES not in dev.capacity


def test_a_plugin_may_answer_for_a_plain_backend() -> None:
    plain = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/npu"))

    class Acme:
        @hookimpl
        def hami_dra_devices(self, backend: DeviceBackend, devices: list[DeviceInfo]) -> list[DraDevice]:
            return [DraDevice("ACME", d.index, d.id, "acme-x", shared=False) for d in devices]

    hook = RoutedHooks(get_plugin_manager(load_entrypoints=False, plugins=[Acme()]), [plain])
    (dev,) = hook.hami_dra_devices(backend=plain, devices=[info(3)])
    assert (dev.name, dev.shared) == ("acme-3", False)


# ------------------------------------------------------------------------------------------ slices

def test_one_pool_per_node_and_driver() -> None:
    (item,) = build_slices("gpu-1", "NVIDIA", devices(), generation=3, vendor="nvidia")
    assert item["apiVersion"] == "resource.k8s.io/v1" and item["kind"] == "ResourceSlice"
    assert item["metadata"]["name"] == "gpu-1-gpu"
    spec = item["spec"]
    assert spec["driver"] == NVIDIA and spec["nodeName"] == "gpu-1"
    assert spec["pool"] == {"name": "gpu-1", "generation": 3, "resourceSliceCount": 1}
    dev = spec["devices"][0]
    assert dev["name"] == "gpu-0"
    assert dev["attributes"][f"{NVIDIA}/uuid"] == {"string": "GPU-0000"}
    assert dev["attributes"][f"{NVIDIA}/index"] == {"int": 0}
    assert dev["attributes"][f"{NVIDIA}/vendor"] == {"string": "nvidia"}
    assert dev["attributes"][f"{NVIDIA}/mode"] == {"string": "hami-core"}
    assert all(name.startswith(f"{NVIDIA}/") for name in dev["attributes"])


def test_shared_devices_carry_consumable_capacity() -> None:
    dev = build_slices("n", "NVIDIA", devices(1))[0]["spec"]["devices"][0]
    assert dev["allowMultipleAllocations"] is True
    assert dev["capacity"]["memory"] == {"value": "81920Mi", "requestPolicy": {
        "default": "81920Mi", "validRange": {"min": "1Mi", "step": "1Mi"}}}
    assert dev["capacity"]["cores"]["requestPolicy"] == {"default": "0", "validRange": {"min": "0", "step": "1"}}
    assert dev["capacity"]["shares"] == {"value": "10", "requestPolicy": {
        "default": "1", "validRange": {"min": "1", "step": "1", "max": "1"}}}


def test_a_whole_card_device_has_no_request_policy() -> None:
    dev = build_slices("n", "NVIDIA", devices(1, count=1))[0]["spec"]["devices"][0]
    assert "allowMultipleAllocations" not in dev
    assert dev["capacity"] == {"memory": {"value": "81920Mi"}, "cores": {"value": "100"}}


def test_unhealthy_devices_are_withdrawn() -> None:
    devs = devices(3)
    devs[1] = replace(devs[1], healthy=False)
    (item,) = build_slices("n", "NVIDIA", devs)
    assert [d["name"] for d in item["spec"]["devices"]] == ["gpu-0", "gpu-2"]


def test_no_healthy_device_still_publishes_the_pool() -> None:
    (item,) = build_slices("n", "NVIDIA", [replace(d, healthy=False) for d in devices(2)], generation=5)
    assert "devices" not in item["spec"] and item["spec"]["pool"]["generation"] == 5


def test_large_nodes_split_into_slices_of_one_pool() -> None:
    many = [DraDevice("NVIDIA", i, f"GPU-{i}", "T") for i in range(MAX_DEVICES_PER_SLICE + 3)]
    slices = build_slices("n", "NVIDIA", many, generation=2)
    assert [len(s["spec"]["devices"]) for s in slices] == [MAX_DEVICES_PER_SLICE, 3]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    assert [s["metadata"]["name"] for s in slices] == ["n-gpu", "n-gpu-1"]


def test_slice_names_are_bounded_and_distinct() -> None:
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    names = {slice_name(long_a, NVIDIA), slice_name(long_b, NVIDIA), slice_name(long_a, NVIDIA, 1)}
    assert len(names) == 3 and all(len(n) <= MAX_NAME for n in names)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", n) for n in names)
    assert slice_name("n", device_class_name("Ascend910B3")) == "n-ascend910b3"


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: replace(d, uuid="x" * 65), "uuid"),
    (lambda d: replace(d, attributes={"uuid": "dup"}), "standard attribute"),
    (lambda d: replace(d, attributes={"bad-name": 1}), "C identifier"),
    (lambda d: replace(d, attributes={"f": 1.5}), "not an int, bool or string"),
    (lambda d: replace(d, attributes={f"a{i}": i for i in range(30)}), "more than 32"),
    (lambda d: replace(d, backend="AMD"), "belongs to backend AMD"),
])
def test_what_the_api_server_refuses_is_a_clear_error(change: Any, field: str) -> None:
    (dev,) = devices(1)
    with pytest.raises(SliceError, match=field) as err:
        build_slices("gpu-1", "NVIDIA", [change(dev)])
    assert "gpu-1" in str(err.value)


def test_two_devices_of_one_name_are_refused() -> None:
    a, b = devices(2)
    with pytest.raises(SliceError, match="GPU-0000 and GPU-0001 have the same name gpu-0"):
        build_slices("n", "NVIDIA", [a, replace(b, index=0)])


def test_bad_node_names_are_refused() -> None:
    for bad in ("", "Node_1", "n" * 254):
        with pytest.raises(SliceError, match="node name"):
            build_slices(bad, "NVIDIA", devices(1))


# ------------------------------------------------------------------------------------------ plan

def as_server_stores(items: list[dict[str, Any]], rv: int = 7) -> list[dict[str, Any]]:
    """Slices as the API server lists them: canonical quantities (81920Mi -> 80Gi), a resourceVersion."""
    out = []
    for item in items:
        stored = json.loads(json.dumps(item).replace('"81920Mi"', '"80Gi"'))
        stored["metadata"]["resourceVersion"] = str(rv)
        out.append(stored)
    return out


def test_first_publication_creates_at_generation_one() -> None:
    p = plan("n", "NVIDIA", devices(), [])
    assert p.changed and p.generation == 1 and len(p.create) == 1 and not p.update and not p.delete


def test_no_change_no_write_no_bump() -> None:
    published = as_server_stores(build_slices("n", "NVIDIA", devices(), generation=4, vendor="nvidia"))
    p = plan("n", "NVIDIA", devices(), published, vendor="nvidia")
    assert not p.changed and p.generation == 4


def test_a_change_bumps_the_generation_and_updates_in_place() -> None:
    published = as_server_stores(build_slices("n", "NVIDIA", devices(), generation=4), rv=42)
    devs = devices()
    devs[0] = replace(devs[0], healthy=False)
    p = plan("n", "NVIDIA", devs, published)
    assert p.generation == 5 and not p.create and not p.delete
    (item,) = p.update
    assert item["metadata"]["resourceVersion"] == "42"
    assert item["spec"]["pool"]["generation"] == 5
    assert [d["name"] for d in item["spec"]["devices"]] == ["gpu-1"]


def test_slices_no_longer_wanted_are_deleted() -> None:
    many = [DraDevice("NVIDIA", i, f"GPU-{i}", "T") for i in range(MAX_DEVICES_PER_SLICE + 1)]
    published = as_server_stores(build_slices("n", "NVIDIA", many, generation=2))
    p = plan("n", "NVIDIA", many[:2], published)
    assert p.generation == 3 and p.delete == ["n-gpu-1"] and [s["metadata"]["name"] for s in p.update] == ["n-gpu"]


def test_a_pool_at_mixed_generations_is_rewritten() -> None:
    many = [DraDevice("NVIDIA", i, f"GPU-{i}", "T") for i in range(MAX_DEVICES_PER_SLICE + 1)]
    published = as_server_stores(build_slices("n", "NVIDIA", many, generation=2))
    published[1]["spec"]["pool"]["generation"] = 1
    p = plan("n", "NVIDIA", many, published)
    assert p.generation == 3 and len(p.update) == 2


def test_canonical_compares_quantities_by_value() -> None:
    (ours,) = build_slices("n", "NVIDIA", devices(1))
    (theirs,) = as_server_stores([ours])
    assert canonical(ours) == canonical(theirs)
    theirs["spec"]["devices"][0]["capacity"]["memory"]["value"] = "79Gi"
    assert canonical(ours) != canonical(theirs)


# ------------------------------------------------------------------------------------------ DeviceClasses

def test_device_class_selects_its_driver() -> None:
    cls = device_class("NVIDIA")
    assert cls["apiVersion"] == "resource.k8s.io/v1" and cls["kind"] == "DeviceClass"
    assert cls["metadata"]["name"] == "hami-core-gpu.project-hami.io"
    assert cls["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "hami-core-gpu.project-hami.io"'}}]
    assert "extendedResourceName" not in cls["spec"]
    assert device_class("AMD", extended_resource_name="amd.com/gpu")["spec"]["extendedResourceName"] == "amd.com/gpu"


def test_device_classes_one_per_backend_sorted() -> None:
    names = [c["metadata"]["name"] for c in device_classes(["NVIDIA", "AMD", "NVIDIA"])]
    assert names == ["hami-core-amd.project-hami.io", "hami-core-gpu.project-hami.io"]
    assert selector_expression("AMD") == 'device.driver == "hami-core-amd.project-hami.io"'


# ------------------------------------------------------------------------------------------ plan, any pool

_DEVICE = st.builds(lambda i, count, mem, healthy: replace(
    standard_dra_devices(backend(), [info(i, count=count, mem=mem)])[0], healthy=healthy),
    st.integers(0, 300), st.integers(1, 12), st.integers(0, 200_000), st.booleans())
_POOL = st.lists(_DEVICE, max_size=140, unique_by=lambda d: d.index)


@settings(max_examples=60, deadline=None)
@given(before=_POOL, after=_POOL, generation=st.integers(1, 10**6))
def test_plan_bumps_exactly_on_change(before: list[DraDevice], after: list[DraDevice], generation: int) -> None:
    published = as_server_stores(build_slices("n", "NVIDIA", before, generation=generation))
    p = plan("n", "NVIDIA", after, published)
    same = [canonical(s) for s in build_slices("n", "NVIDIA", after)] == [canonical(s) for s in published]
    assert p.changed != same
    assert p.generation == (generation if same else generation + 1)
    if p.changed:  # applying the plan gives exactly the wanted pool, every slice at the new generation
        kept = {s["metadata"]["name"]: s for s in published}
        for item in [*p.update, *p.create]:
            kept[item["metadata"]["name"]] = item
        for name in p.delete:
            del kept[name]
        assert sorted(kept) == sorted(s["metadata"]["name"] for s in build_slices("n", "NVIDIA", after))
        assert {s["spec"]["pool"]["generation"] for s in kept.values()} == {generation + 1}
        assert not plan("n", "NVIDIA", after, as_server_stores(list(kept.values()))).changed
