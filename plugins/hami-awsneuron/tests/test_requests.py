"""Admission and requests (HAMi ``MutateAdmission``, ``GenerateResourceRequests``): bad quantities and the rules
that depend on the cores per device a node registered."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from awsneuron_testlib import NEURON, NEURONCORE, Clock, container, make_backend, make_engine, make_pod, neuron_node

from hami_core.plugins import AdmissionFailed, DeviceRequest


@pytest.mark.parametrize(("resource", "value", "message"), [
    (NEURON, "1.5", "aws.amazon.com/neuron must be an integer"),
    (NEURON, "500m", "aws.amazon.com/neuron must be an integer"),
    (NEURON, "lots", "aws.amazon.com/neuron must be an integer"),
    (NEURON, "0", "aws.amazon.com/neuron must be greater than 0"),
    (NEURON, "-1", "aws.amazon.com/neuron must be greater than 0"),
    (NEURONCORE, "0.5", "aws.amazon.com/neuroncore must be an integer"),
    (NEURONCORE, "1e30", "aws.amazon.com/neuroncore must be an integer"),  # beyond int64: AsInt64 fails
])
def test_bad_quantities_fail_admission_and_request_nothing(resource: str, value: Any, message: str) -> None:
    backend = make_backend(cores_per_device=2)
    ctr = container("train", limits={resource: value})
    with pytest.raises(AdmissionFailed, match=f"^container train: {re.escape(message)}$"):
        backend.hami_mutate_container(make_pod(ctr), ctr)
    assert backend.hami_container_request(ctr) is None


def test_an_invalid_count_does_not_fall_back_to_cores() -> None:
    ctr = container(limits={NEURON: "0", NEURONCORE: "1"})
    assert make_backend(cores_per_device=2).hami_container_request(ctr) is None


def test_count_wins_over_cores() -> None:
    ctr = container(limits={NEURON: "2", NEURONCORE: "1"})
    assert make_backend(cores_per_device=2).hami_container_request(ctr) == DeviceRequest("AWSNeuron", 2, 0, 0, 2)


def test_limits_win_over_requests() -> None:
    ctr = container(limits={NEURONCORE: "2"}, requests={NEURONCORE: "3"})
    assert make_backend(cores_per_device=2).hami_container_request(ctr) == DeviceRequest("AWSNeuron", 1, 0, 0, 2)


@pytest.mark.parametrize(("per_device", "limits", "want"), [
    # before any node: whole devices ask 0 cores, core requests split by 2
    (0, {NEURON: "1"}, (1, 0)),
    (0, {NEURONCORE: "4"}, (2, 2)),
    # Inferentia 1 (4 cores per device): a whole device asks all 4, core requests use the 2 addressable
    (4, {NEURON: "1"}, (1, 4)),
    (4, {NEURONCORE: "2"}, (1, 2)),
    (4, {NEURONCORE: "6"}, (3, 2)),
    # one core per device: every core is a device
    (1, {NEURONCORE: "3"}, (3, 1)),
])
def test_requests_follow_the_cores_per_device(per_device: int, limits: dict[str, str], want: tuple[int, int]) -> None:
    req = make_backend(cores_per_device=per_device).hami_container_request(container(limits=limits))
    assert req is not None
    assert (req.nums, req.coresreq, req.memreq, req.mem_percentage) == (*want, 0, 0)


def test_engine_requests_learn_the_cores_from_the_first_node(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    pod = make_pod(container(limits={NEURON: "1"}))
    assert engine.requests(pod).containers[0]["AWSNeuron"].coresreq == 0
    engine.upsert_node(neuron_node("inf1", 4, 16, instance_type="inf1.24xlarge"))
    assert engine.requests(pod).containers[0]["AWSNeuron"].coresreq == 4


def test_admission_changes_nothing_and_reads_requests_too() -> None:
    engine = make_engine()
    pod = make_pod(container("a", requests={NEURONCORE: "1"}), init=[container("i", limits={NEURON: "1"})])
    admitted = engine.admit(copy.deepcopy(pod))
    assert admitted["spec"]["schedulerName"] == "hami-scheduler"
    assert admitted["spec"]["containers"] == pod["spec"]["containers"]
    assert admitted["spec"]["initContainers"] == pod["spec"]["initContainers"]


def test_a_bad_init_container_fails_the_pod() -> None:
    pod = make_pod(container("a", limits={NEURON: "1"}), init=[container("setup", limits={NEURONCORE: "3"})])
    with pytest.raises(AdmissionFailed, match=r"container setup: aws\.amazon\.com/neuroncore must be 1 or a multiple"):
        make_engine().admit(pod)
