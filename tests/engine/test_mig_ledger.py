"""The engine's MIG bookkeeping, without a vendor plugin (scheduler.md §6.3 step 3): the ledger books a pod's MIG
instances on its GPUs and takes them back, a booking that contradicts a GPU's mode makes that GPU unhealthy while it
lasts, the capacity summaries count a MIG GPU for the instances it can still host, and the standard fit's revisit."""

from __future__ import annotations

import numpy as np

from hami_core.engine.inventory import NodeState
from hami_core.engine.ledger import Booking, Ledger, mig_from_allocations, mig_from_devices
from hami_core.engine.table import NodeTable
from hami_core.plugins.fit import collapse, standard_fit
from hami_core.plugins.types import (
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    MigInstance,
    MigProfile,
    Placement,
)
from hami_core.wire.mig import MIG_PLACEMENT_CUSTOM_INFO, MIG_PROFILE_CUSTOM_INFO, MigAllocation

ONE_G = MigProfile("1g.5gb", 5120, 14, 1, tuple(Placement(s, 1) for s in range(7)))


def node(*devices: DeviceInfo) -> NodeState:
    state = NodeState("n1")
    state.set_devices({"NVIDIA": list(devices)})
    return state


def mig_info(id: str, index: int = 0, *, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=id, index=index, count=7, devmem=40960, devcore=100, type="NVIDIA A100", mode="mig",
                      health=health, mig_profiles=(ONE_G,), vendor="NVIDIA")


def core_info(id: str, index: int = 0) -> DeviceInfo:
    return DeviceInfo(id=id, index=index, count=10, devmem=40960, devcore=100, type="NVIDIA A100", mode="hami-core",
                      health=True, vendor="NVIDIA")


def mig_device(uuid: str, start: int) -> ContainerDevice:
    return ContainerDevice(uuid, "NVIDIA", 5120, 14, 0, custom_info={MIG_PROFILE_CUSTOM_INFO: "1g.5gb",
                                                                     MIG_PLACEMENT_CUSTOM_INFO: Placement(start, 1)})


def booking(key: str, devices: list[ContainerDevice], mig: dict[str, tuple[MigInstance, ...]] | None = None) -> Booking:
    assigned = {"NVIDIA": (tuple(devices),)}
    return Booking(key, f"default/{key}", "n1", collapse(assigned, 0),
                   mig_from_devices(assigned) if mig is None else mig)


def test_instances_are_booked_and_released() -> None:
    state, ledger = node(mig_info("GPU-m")), Ledger()
    ledger.book(booking("a", [mig_device("GPU-m", 6), mig_device("GPU-m", 5)]), {"n1": state})
    ledger.book(booking("b", [mig_device("GPU-m", 4)]), {"n1": state})
    gpu = state.by_uuid["GPU-m"]
    assert [i.placement.start for i in gpu.mig_in_use] == [6, 5, 4]
    assert (gpu.used, gpu.usedmem, gpu.usedcores, gpu.health) == (3, 15360, 42, True)
    ledger.unbook("a", {"n1": state})
    assert [i.placement.start for i in gpu.mig_in_use] == [4]
    # re-booking a pod replaces its instances instead of adding them twice
    ledger.book(booking("b", [mig_device("GPU-m", 3)]), {"n1": state})
    assert [i.placement.start for i in gpu.mig_in_use] == [3]


def test_a_re_registered_node_re_books_its_instances() -> None:
    state, ledger = node(mig_info("GPU-m")), Ledger()
    ledger.book(booking("a", [mig_device("GPU-m", 6)]), {"n1": state})
    state.set_devices({"NVIDIA": [mig_info("GPU-m"), mig_info("GPU-n", 1)]})   # fresh usage objects
    assert state.by_uuid["GPU-m"].mig_in_use == ()
    ledger.reapply(state)
    assert [i.placement.start for i in state.by_uuid["GPU-m"].mig_in_use] == [6]


def test_contradicting_bookings_make_the_gpu_unhealthy_while_they_last() -> None:
    state, ledger = node(core_info("GPU-s"), mig_info("GPU-m", 1)), Ledger()
    nodes = {"n1": state}
    # a MIG instance on a hami-core GPU
    ledger.book(booking("on-shared", [mig_device("GPU-s", 6)]), nodes)
    # a MIG GPU used without an instance (twice: both must go before it is healthy again)
    for key in ("plain-1", "plain-2"):
        ledger.book(booking(key, [ContainerDevice("GPU-m", "NVIDIA", 1000, 10, 1)]), nodes)
    shared, mig = state.by_uuid["GPU-s"], state.by_uuid["GPU-m"]
    assert (shared.health, shared.mig_in_use, shared.used) == (False, (), 1)
    assert (mig.health, mig.mig_conflicts) == (False, 2)
    generation = state.generation
    ledger.unbook("plain-1", nodes)
    assert mig.health is False and state.generation > generation
    ledger.unbook("plain-2", nodes)
    ledger.unbook("on-shared", nodes)
    assert (shared.health, mig.health, shared.mig_conflicts, mig.mig_conflicts) == (True, True, 0, 0)


def test_instances_on_an_unknown_gpu_are_ignored() -> None:
    state, ledger = node(mig_info("GPU-m")), Ledger()
    ledger.book(booking("a", [mig_device("GPU-gone", 6)]), {"n1": state})
    assert state.by_uuid["GPU-m"].mig_in_use == () and state.by_uuid["GPU-m"].health


def test_instances_from_an_annotation_keep_their_runtime_identity() -> None:
    allocations = [MigAllocation(0, 0, "GPU-m", "1g.5gb", Placement(6, 1), "MIG-x", 13, 0),
                   MigAllocation(1, 0, "GPU-m", "1g.5gb", Placement(5, 1))]
    assert mig_from_allocations(allocations) == {"GPU-m": (MigInstance("1g.5gb", Placement(6, 1), "MIG-x", 13, 0),
                                                           MigInstance("1g.5gb", Placement(5, 1)))}
    # devices without a profile and placement (or with a size-0 placement) are not MIG devices
    zero = ContainerDevice("GPU-m", "NVIDIA", 1, 1, 0, custom_info={MIG_PROFILE_CUSTOM_INFO: "1g.5gb",
                                                                   MIG_PLACEMENT_CUSTOM_INFO: Placement(0, 0)})
    assert mig_from_devices({"NVIDIA": ((ContainerDevice("GPU-s", "NVIDIA", 1, 1), zero),)}) == {}


def test_usage_copies_carry_the_instances() -> None:
    usage = DeviceUsage(mig_info("GPU-m"))
    usage.mig_in_use = (MigInstance("1g.5gb", Placement(6, 1)),)
    copy = usage.copy()
    assert copy.mig_in_use == usage.mig_in_use and copy.mig_conflicts == 0


def test_capacity_summary_counts_instances_a_mig_gpu_can_host() -> None:
    table = NodeTable()
    state = node(mig_info("GPU-m"))
    table.add(state)
    table.refresh()
    rows = np.array([state.row])
    # one MIG GPU with 7 free instance slots may take a 3-instance request; a shared GPU may not
    assert table.feasible(rows, "NVIDIA", DeviceRequest("NVIDIA", 3, 5000)).tolist() == [True]
    assert table.feasible(rows, "NVIDIA", DeviceRequest("NVIDIA", 8, 5000)).tolist() == [False]
    shared = NodeState("n2")
    shared.set_devices({"NVIDIA": [core_info("GPU-s")]})
    table.add(shared)
    table.refresh()
    assert table.feasible(np.array([shared.row]), "NVIDIA", DeviceRequest("NVIDIA", 3, 5000)).tolist() == [False]


def test_standard_fit_revisits_only_where_asked() -> None:
    devices = [DeviceUsage(core_info("GPU-s")), DeviceUsage(mig_info("GPU-m", 1))]
    budget = {"GPU-m": 2}

    def rule(dev: DeviceUsage, mem: int, cores: int, chosen: object) -> bool:
        taken = sum(1 for d in chosen if d.uuid == dev.id)  # type: ignore[attr-defined]
        return taken < budget.get(dev.id, 1)

    def is_mig(dev: DeviceUsage) -> bool:
        return dev.mode == "mig"

    got = standard_fit(devices, DeviceRequest("NVIDIA", 3, 100), custom_rule=rule, revisit=is_mig)
    assert [d.uuid for d in got.devices] == ["GPU-m", "GPU-m", "GPU-s"]
    without = standard_fit(devices, DeviceRequest("NVIDIA", 3, 100), custom_rule=rule)
    assert without.reason == "2/2 AllocatedCardsInsufficientRequest"
    # the refusal on the revisit is counted like any other
    short = standard_fit(devices[1:], DeviceRequest("NVIDIA", 3, 100), custom_rule=rule, revisit=is_mig)
    assert short.reason == "1/1 CardNotFoundCustomFilterRule, 2/1 AllocatedCardsInsufficientRequest"
