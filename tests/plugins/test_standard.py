"""The knobs of ``StandardBackend`` that vendors set instead of overriding a step, and the shared helpers
(``as_whole``, ``quantity_value``, ``node_capacity``, ``capacity_count``, ``capacity_health``, ``unix_nanos``,
``same_devices_rule``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pytest

from hami_core.plugins import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceRequest,
    HealthReport,
    ResourceNames,
    StandardBackend,
    WireFormatError,
    as_whole,
    capacity_count,
    capacity_health,
    node_capacity,
    quantity_value,
    same_devices_rule,
    unix_nanos,
)
from hami_core.testing import candidate, container, gpu_policy, node, usage

NAMES = ResourceNames(count="acme.com/npu", memory="acme.com/npu-mem", cores="acme.com/npu-cores", memory_factor=2)


@dataclass(frozen=True, slots=True)
class Plain(StandardBackend):
    pass


@dataclass(frozen=True, slots=True)
class MemoryWins(StandardBackend):
    memory_given_percentage: ClassVar[int] = 0
    fractional_memory: ClassVar[Literal["drop", "ignore"]] = "ignore"


@dataclass(frozen=True, slots=True)
class SameDevices(StandardBackend):
    same_devices_as_earlier_containers: ClassVar[bool] = True


def _backend(cls: type[StandardBackend]) -> StandardBackend:
    return cls(name="ACME", vendor="acme", resource_names=NAMES)


def _npu(mem: Any = None, **limits: Any) -> dict[str, Any]:
    given = {"acme.com/npu": 1, **({} if mem is None else {"acme.com/npu-mem": mem}), **limits}
    return container(limits=given)


# ------------------------------------------------------------------------------------------- request knobs
def test_defaults_keep_the_generic_rules() -> None:
    b = _backend(Plain)
    assert b.hami_container_request(_npu()) == DeviceRequest("ACME", 1, 0, 100, 0)
    assert b.hami_container_request(_npu(mem=8)) == DeviceRequest("ACME", 1, 16, MEM_PERCENTAGE_UNSET, 0)
    for unreadable in ("1.5", "500m", "bogus", "1e30"):
        assert b.hami_container_request(_npu(mem=unreadable)) is None


def test_memory_given_percentage() -> None:
    b = _backend(MemoryWins)
    assert b.hami_container_request(_npu(mem=8)) == DeviceRequest("ACME", 1, 16, 0, 0)
    assert b.hami_container_request(_npu()) == DeviceRequest("ACME", 1, 0, 100, 0)


@pytest.mark.parametrize("unreadable", ["1.5", "500m", "bogus", "1e30"])
def test_fractional_memory_ignore_books_the_whole_card(unreadable: str) -> None:
    assert _backend(MemoryWins).hami_container_request(_npu(mem=unreadable)) == DeviceRequest("ACME", 1, 0, 100, 0)


def test_fractional_memory_ignore_still_drops_out_of_range_values() -> None:
    b = _backend(MemoryWins)
    assert b.hami_container_request(_npu(mem=-1)) is None
    assert b.hami_container_request(_npu(mem=2**31 // 2)) is None  # x2 overflows int32
    assert b.hami_container_request(_npu(mem=2**31 // 2 - 1)) == DeviceRequest("ACME", 1, 2**31 - 2, 0, 0)


# ------------------------------------------------------------------------------------------- same devices
def _held(*uuids: str) -> list[list[ContainerDevice]]:
    return [[ContainerDevice(u, "ACME", 0, 0)] for u in uuids]


def test_same_devices_rule() -> None:
    assert same_devices_rule([]) is None
    assert same_devices_rule([[]]) is None
    rule = same_devices_rule(_held("a"))
    assert rule is not None
    assert rule(usage("a", vendor="ACME"), 0, 0, ()) is True
    assert rule(usage("b", vendor="ACME"), 0, 0, ()) is False
    both = same_devices_rule(_held("a", "b"))
    assert both is not None and not both(usage("a", vendor="ACME"), 0, 0, ())


def test_same_devices_as_earlier_containers_in_the_fit() -> None:
    b = _backend(SameDevices)
    devices = [usage("a", vendor="ACME"), usage("b", vendor="ACME")]
    first = candidate(devices)
    later = candidate(devices, allocated={"ACME": _held("a")})
    pod = {"metadata": {"annotations": {}}}
    request = DeviceRequest("ACME", 1, 0, MEM_PERCENTAGE_UNSET, 0)
    fresh, held = b.hami_filter_nodes(pod, request, [first, later], gpu_policy(), None)
    assert [d.uuid for d in fresh.devices] == ["b"]  # the preferred (last) device: no rule yet
    assert [d.uuid for d in held.devices] == ["a"]
    assert b.vector_fit_options(pod, request, gpu_policy(), None) is None
    assert _backend(Plain).vector_fit_options(pod, request, gpu_policy(), None) == {"mutex": False}
    _, plain_held = _backend(Plain).hami_filter_nodes(pod, request, [first, later], gpu_policy(), None)
    assert [d.uuid for d in plain_held.devices] == ["b"]


# ------------------------------------------------------------------------------------------- helpers
def test_as_whole() -> None:
    assert [as_whole(v) for v in (None, "3", 3, "2Ki", "1.5", "500m", "bogus")] == [None, 3, 3, 2048, None, None, None]
    assert as_whole("1e30") == 10**30  # beyond int64, unlike as_int64


def test_quantity_value_rounds_up_like_go() -> None:
    assert [quantity_value(v) for v in ("3", "1.5", "-1.5", "500m", "1Ki", "bogus")] == [3, 2, -1, 1, 1024, None]


def test_node_capacity() -> None:
    n = node("n1", capacity={"acme.com/npu": 4})
    assert node_capacity(n, "acme.com/npu") == "4"
    assert node_capacity(n, "acme.com/other") is None
    assert node_capacity({"metadata": {"name": "bare"}}, "acme.com/npu") is None
    assert node_capacity({"status": {"capacity": None}}, "acme.com/npu") is None


def test_unix_nanos_is_exact_for_todays_times() -> None:
    assert unix_nanos(1_750_000_000.0) == 1_750_000_000_000_000_000
    assert unix_nanos(1_750_000_000.25) == 1_750_000_000_250_000_000
    assert unix_nanos(0.5) == 500_000_000


def test_capacity_count() -> None:
    assert capacity_count(node("n1"), "acme.com/npu") is None
    assert capacity_count(node("n1", capacity={"acme.com/npu": 4}), "acme.com/npu") == 4
    assert capacity_count(node("n1", capacity={"acme.com/npu": -1}), "acme.com/npu") == -1
    with pytest.raises(WireFormatError, match=r"^node n1: status\.capacity\[acme\.com/npu\]: '1\.5' is not a whole"):
        capacity_count(node("n1", capacity={"acme.com/npu": "1.5"}), "acme.com/npu")
    with pytest.raises(WireFormatError, match=r"^node n1: status\.capacity\[acme\.com/npu\]: .* more than"):
        capacity_count(node("n1", capacity={"acme.com/npu": 10**6}), "acme.com/npu")


def test_capacity_health() -> None:
    # absent capacity is unhealthy as in HAMi (Go reads a missing quantity as 0): the node's cards are cleaned up
    assert capacity_health(node("n1"), "acme.com/npu") == HealthReport(
        False, True, reason="status.capacity[acme.com/npu] is absent")
    assert capacity_health(node("n1", capacity={"acme.com/npu": 2}), "acme.com/npu") == HealthReport(True, True)
    for none in (0, "x"):
        sick = capacity_health(node("n1", capacity={"acme.com/npu": none}), "acme.com/npu")
        assert sick == HealthReport(False, True, reason=f"status.capacity[acme.com/npu] is {str(none)!r}")
