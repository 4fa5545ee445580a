"""Allocate for one container (``docs/develop/amd-vgpu.md`` §4.2, §5): env, the audit library, exclusive CU masks."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from amd_testlib import CU_ALLOCATED, make_backend
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_amd.allocate import read_holdings
from hami_amd.cumask import parse_cu_list
from hami_core.plugins import ContainerAllocation, ContainerDevice, Mount, WireFormatError
from hami_core.plugins.node_context import NodeContext, bound
from hami_core.testing import pod as make_pod

A, B = "node~0000%3A05%3A00.0", "node~0000%3A26%3A00.0"
LIB = "/usr/local/vgpu/libamvgpu.so"


def dev(uuid: str, mem: int = 16384, cus: int = 76) -> ContainerDevice:
    return ContainerDevice(uuid, "AMD Instinct MI300X VF", mem, cus)


def holder(name: str, holdings: dict[str, str] | str, phase: str = "Running") -> dict[str, Any]:
    value = holdings if isinstance(holdings, str) else json.dumps(holdings)
    return make_pod(name=name, uid=f"uid-{name}", phase=phase, annotations={CU_ALLOCATED: value})


def allocate(pod: dict[str, Any], devices: list[ContainerDevice], node_pods: list[dict[str, Any]] | None = None,
             index: int = 0) -> ContainerAllocation:
    """The hook as the device plugin calls it; ``node_pods`` are what the node context lists (no context: None)."""
    amd = make_backend()
    if node_pods is None:
        return amd.hami_allocate(pod, index, devices)
    with bound(NodeContext("node", lambda: node_pods)):
        return amd.hami_allocate(pod, index, devices)


def test_one_vgpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOST_HOOK_PATH", raising=False)
    out = allocate(make_pod(name="p", uid="uid-p"), [dev(A)])
    assert out.env == {"ROCR_VISIBLE_DEVICES": "0", "HSA_CU_MASK": "0:0-75", "HIP_DEVICE_MEMORY_LIMIT": "16384m",
                       "LD_AUDIT": LIB}
    assert out.mounts == (Mount(LIB, "/usr/local/vgpu/libamvgpu.so", read_only=True),)
    assert out.pod_annotations == {CU_ALLOCATED: json.dumps({A: "0-75"}, separators=(",", ":"))}


def test_host_hook_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST_HOOK_PATH", "/opt/hami/")
    (mount,) = allocate(make_pod(), [dev(A)]).mounts
    assert (mount.container_path, mount.host_path) == (LIB, "/opt/hami/vgpu/libamvgpu.so")


def test_two_gpus_use_container_local_indexes_and_the_first_memory() -> None:
    # §4.2: "two GPUs: UUID-A (index 0) gets CUs 0-75, UUID-B (index 1) gets CUs 0-75"
    out = allocate(make_pod(), [dev(A, mem=8192), dev(B, mem=4096)])
    assert out.env["HSA_CU_MASK"] == "0:0-75;1:0-75"
    assert out.env["ROCR_VISIBLE_DEVICES"] == "0,1"
    assert out.env["HIP_DEVICE_MEMORY_LIMIT"] == "8192m"  # §5.1: one limit for every GPU of the container
    assert read_holdings({"metadata": {"annotations": dict(out.pod_annotations)}}) == {
        A: frozenset(range(76)), B: frozenset(range(76))}


def test_allocation_order_defines_the_index() -> None:
    out = allocate(make_pod(), [dev(B, cus=10), dev(A, cus=20)], [holder("other", {A: "0-99"})])
    assert out.env["HSA_CU_MASK"] == "0:0-9;1:100-119"


def test_ranges_skip_what_other_pods_hold() -> None:
    others = [holder("x", {A: "0-75"}), holder("y", {A: "100-120", B: "0-303"})]
    out = allocate(make_pod(name="p", uid="uid-p"), [dev(A)], others)
    assert out.env["HSA_CU_MASK"] == "0:76-99,121-172"


def test_finished_pods_release_their_cus_and_the_pods_own_stale_copy_is_not_another_pod() -> None:
    me = make_pod(name="p", uid="uid-p")
    others = [holder("done", {A: "0-75"}, phase="Succeeded"), holder("failed", {A: "76-151"}, phase="Failed"),
              holder("p", {A: "0-303"})]  # the listed copy of this very pod (uid-p): not someone else's CUs
    assert allocate(me, [dev(A)], others).env["HSA_CU_MASK"] == "0:0-75"


def test_containers_of_one_pod_get_disjoint_ranges_and_one_merged_record() -> None:
    pod = make_pod(name="p", uid="uid-p")
    first = allocate(pod, [dev(A, cus=30)], [])
    # what the device plugin applies between the calls
    pod["metadata"].setdefault("annotations", {}).update(first.pod_annotations)
    second = allocate(pod, [dev(A, cus=30)], [], index=1)
    assert (first.env["HSA_CU_MASK"], second.env["HSA_CU_MASK"]) == ("0:0-29", "0:30-59")
    assert json.loads(second.pod_annotations[CU_ALLOCATED]) == {A: "0-59"}


def test_a_container_without_devices_gets_nothing() -> None:
    assert allocate(make_pod(), []) == ContainerAllocation()


@pytest.mark.parametrize("value", ["not json", "[\"0-3\"]", "{\"A\": 3}", "{\"A\": \"3-1\"}"])
def test_the_pods_own_unreadable_record_fails_naming_pod_and_annotation(value: str) -> None:
    pod = make_pod(name="p", annotations={CU_ALLOCATED: value})
    with pytest.raises(WireFormatError, match=r"pod default/p: hami.io/amd-cu-allocated"):
        allocate(pod, [dev(A)])


def test_another_pods_unreadable_record_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hami.amd"):
        out = allocate(make_pod(name="p", uid="uid-p"), [dev(A)], [holder("bad", "{oops"), holder("ok", {A: "0"})])
    assert out.env["HSA_CU_MASK"] == "0:1-76"
    assert "pod default/bad: hami.io/amd-cu-allocated" in caplog.text


def test_a_device_booked_without_cus_fails() -> None:
    with pytest.raises(WireFormatError, match=rf"pod default/p: device {A}: a device needs at least 1 compute unit"):
        allocate(make_pod(name="p"), [dev(A, cus=0)])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(1, 120), min_size=1, max_size=2), min_size=1, max_size=8))
def test_masks_of_pods_sharing_gpus_never_overlap(pods: list[list[int]]) -> None:
    # Pods arrive one by one (each container one GPU of A/B, alternating), each Allocate sees the earlier pods.
    node_pods: list[dict[str, Any]] = []
    held: dict[str, set[int]] = {A: set(), B: set()}
    for n, counts in enumerate(pods):
        devices = [dev((A, B)[(n + i) % 2], cus=c) for i, c in enumerate(counts)]
        me = make_pod(name=f"p{n}", uid=f"uid-{n}")
        out = allocate(me, devices, list(node_pods))
        masks = dict(entry.split(":") for entry in out.env["HSA_CU_MASK"].split(";"))
        for i, d in enumerate(devices):
            cus = parse_cu_list(masks[str(i)])
            assert len(cus) == d.usedcores and not cus & held[d.uuid]
            held[d.uuid] |= cus
        me["metadata"].setdefault("annotations", {}).update(out.pod_annotations)
        node_pods.append(me)
