"""Devices synthesised from a node's ``status.capacity`` (HAMi ``GetNodeDevices``) and health (``CheckHealth``)."""

from __future__ import annotations

import pytest
from awsneuron_testlib import NEURONCORE, Clock, make_backend, make_engine, neuron_node

from hami_core.plugins import WireFormatError
from hami_core.testing import node


def test_devices_carry_cores_mask_and_instance_type() -> None:
    devices = make_backend().hami_node_devices(neuron_node("n", 3, 6, instance_type="inf2.24xlarge"))
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.health) for d in devices] == [
        (f"n-AWSNeuron-{i}", i, 2, 0, 3, "AWSNeuron", True) for i in range(3)]
    assert {d.custom_info["AWSNodeType"] for d in devices} == {"inf2.24xlarge"}


def test_four_cores_per_device_give_a_four_bit_mask() -> None:
    (device,) = make_backend().hami_node_devices(neuron_node("inf1", 1, 4, instance_type="inf1.xlarge"))
    assert (device.count, device.devcore) == (4, 15)


def test_missing_instance_type_label_is_empty() -> None:
    (device,) = make_backend().hami_node_devices(neuron_node("n", 1, 2, instance_type=None))
    assert device.custom_info == {"AWSNodeType": ""}


def test_cores_per_device_come_from_the_first_node_and_stay() -> None:
    # HAMi sets coresPerAWSNeuron once, from the first node with devices; later nodes reuse it.
    backend = make_backend()
    backend.hami_node_devices(neuron_node("trn", 2, 4))
    assert backend.layout.cores_per_device == 2
    devices = backend.hami_node_devices(neuron_node("inf1", 2, 8, instance_type="inf1.6xlarge"))
    assert {(d.count, d.devcore) for d in devices} == {(2, 3)}


def test_without_core_capacity_devices_have_no_slot_until_a_node_tells() -> None:
    backend = make_backend()
    devices = backend.hami_node_devices(neuron_node("bare", 2, None))
    assert {(d.count, d.devcore) for d in devices} == {(0, 0)}
    assert backend.layout.cores_per_device == 0
    backend.hami_node_devices(neuron_node("trn", 2, 4))
    assert backend.layout.cores_per_device == 2


def test_node_without_the_count_resource_has_no_devices() -> None:
    assert make_backend().hami_node_devices(node("cpu-only", allocatable={"cpu": 8})) == []
    assert make_backend().hami_node_devices(neuron_node("negative", -1, 2)) == []


def test_zero_devices_is_hamis_device_not_found_error() -> None:
    with pytest.raises(WireFormatError, match=r"status.capacity\[aws.amazon.com/neuron\]: device not found "
                                              r"aws.amazon.com/neuron"):
        make_backend().hami_node_devices(neuron_node("n", 0, 0))


@pytest.mark.parametrize("bad", ["1.5", "lots", "500m"])
def test_unreadable_device_count_names_the_field(bad: str) -> None:
    with pytest.raises(WireFormatError, match=r"node n: status.capacity\[aws.amazon.com/neuron\]"):
        make_backend().hami_node_devices(neuron_node("n", bad, 4))


def test_unreadable_core_count_counts_as_none() -> None:
    # Go ignores the AsInt64 error of the core capacity: 0 cores.
    devices = make_backend().hami_node_devices(neuron_node("n", 2, "1.5"))
    assert {d.count for d in devices} == {0}


@pytest.mark.parametrize(("cores", "why"), [(-4, "is negative"), (64, "more than HAMi's core mask holds")])
def test_impossible_core_counts_name_the_field(cores: int, why: str) -> None:
    backend = make_backend()
    with pytest.raises(WireFormatError, match=rf"status.capacity\[aws.amazon.com/neuroncore\]: .*{why}"):
        backend.hami_node_devices(neuron_node("n", 1, cores))
    assert backend.layout.cores_per_device == 0  # nothing learned from a refused node


def test_engine_keeps_previous_devices_when_the_count_drops_to_zero(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    assert engine.upsert_node(neuron_node("n", 2, 4)).devices == {"AWSNeuron": 2}
    status = engine.upsert_node(neuron_node("n", 0, 0))
    assert status.errors and "device not found" in next(iter(status.errors.values()))
    assert len(engine.nodes["n"].devices["AWSNeuron"]) == 2


def test_health_is_always_good_and_writes_no_handshake(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(neuron_node("n", 2, 4))
    assert status.patch == {}
    clock.now += 3600
    again = neuron_node("n", 2, 4)
    again["status"]["allocatable"] = {}  # nothing allocatable: the generic rule would go stale; Neuron's does not
    assert engine.upsert_node(again).devices == {"AWSNeuron": 2}
    assert make_backend().hami_node_health(again, [], clock.now).healthy


def test_custom_count_name_reads_that_capacity() -> None:
    backend = make_backend(resourceCountName="example.com/neuron")
    assert backend.hami_node_devices(neuron_node("n", 2, 4)) == []
    devices = backend.hami_node_devices(node("n", capacity={"example.com/neuron": 2, NEURONCORE: 4}))
    assert len(devices) == 2  # the chart name aws.amazon.com/neuron is not read
