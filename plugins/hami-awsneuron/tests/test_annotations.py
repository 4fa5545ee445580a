"""The pod annotations a decision writes (HAMi ``PatchAnnotations``) and their decoding after a restart."""

from __future__ import annotations

from awsneuron_testlib import (
    ALLOC_TIME,
    ALLOCATED,
    AWS_NEURON_IDS,
    NEURON,
    NEURON_ALLOCATED,
    NEURONCORE,
    PREDICATE_NODE,
    RESOURCE_TYPE,
    Clock,
    container,
    make_backend,
    make_engine,
    make_pod,
    neuron_node,
)

from hami_core.plugins import ContainerDevice
from hami_core.testing import T0, running_pod


def dev(idx: int, cores: int) -> ContainerDevice:
    return ContainerDevice(f"n-AWSNeuron-{idx}", "AWSNeuron", 0, cores, idx)


def test_ids_accumulate_over_the_containers_in_order() -> None:
    pod = make_pod(container("b", limits={NEURON: "1"}), container("c", limits={NEURONCORE: "1"}),
                   init=[container("a", limits={NEURONCORE: "1"})])
    devices = ((dev(3, 2),), (dev(5, 3),), (dev(1, 1),))
    out = make_backend(cores_per_device=2).hami_allocation_annotations(pod, devices, node="n", now=T0 + 0.5)
    assert out == {
        ALLOCATED: "n-AWSNeuron-3,AWSNeuron,0,2:;n-AWSNeuron-5,AWSNeuron,0,3:;n-AWSNeuron-1,AWSNeuron,0,1:;",
        AWS_NEURON_IDS: "7,5,2",  # init core 2x3+1, then device 5, then core 2x1
        RESOURCE_TYPE: NEURONCORE,
        ALLOC_TIME: "1750000000500000000",  # Unix nanoseconds of the decision
        NEURON_ALLOCATED: "false",
        PREDICATE_NODE: "n",
    }


def test_a_count_only_in_requests_lists_cores() -> None:
    # HAMi reads the count from limits only here: a request-only count container is treated as a core request.
    pod = make_pod(container(requests={NEURON: "1"}))
    out = make_backend(cores_per_device=2).hami_allocation_annotations(pod, ((dev(4, 3),),), node="n", now=T0)
    assert (out[AWS_NEURON_IDS], out[RESOURCE_TYPE]) == ("8,9", NEURONCORE)


def test_core_ids_use_the_cores_per_device() -> None:
    pod = make_pod(container(limits={NEURONCORE: "2"}))
    out = make_backend(cores_per_device=4).hami_allocation_annotations(pod, ((dev(2, 3),),), node="n", now=T0)
    assert out[AWS_NEURON_IDS] == "8,9"


def test_no_core_in_the_mask_writes_only_the_allocated_key() -> None:
    pod = make_pod(container(limits={NEURONCORE: "1"}))
    out = make_backend(cores_per_device=4).hami_allocation_annotations(pod, ((dev(0, 0),),), node="n", now=T0)
    assert out == {ALLOCATED: "n-AWSNeuron-0,AWSNeuron,0,0:;"}


def test_a_restart_books_what_the_annotation_says(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(neuron_node("n", 2, 4))
    engine.upsert_pod(running_pod("old", "n", {ALLOCATED: "n-AWSNeuron-1,AWSNeuron,0,1:;"},
                                  containers=[container(limits={NEURONCORE: "1"})]))
    (d0, d1) = engine.nodes["n"].devices["AWSNeuron"]
    assert (d1.used, d1.usedcores, d0.used) == (1, 1, 0)
    # the next single core goes to the same device's second core under binpack
    pod = make_pod(container(limits={NEURONCORE: "1"}), gpu_policy="binpack")
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == "n-AWSNeuron-1,AWSNeuron,0,2:;"
    assert decision.annotations[AWS_NEURON_IDS] == "3"
