"""Admission, HAMi ``MutateAdmission`` + the webhook around it (scheduler §4.3-§4.4, vendors B.4)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from nvidia_testlib import (
    GPU,
    GPUCORES,
    GPUMEM,
    GPUMEM_PCT,
    PRIORITY,
    container,
    gpu_container,
    make_engine,
    make_pod,
)

from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.testing import container_limits

#: The limits of a pod's i-th app container.
limits = container_limits


def env(ctr: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in ctr.get("env", [])}


# ------------------------------------------------------------------------------------ resource defaults
def test_bare_count_becomes_an_exclusive_card() -> None:
    out = make_engine().admit(make_pod(gpu_container(gpus=1)))
    assert limits(out) == {GPU: "1", GPUCORES: "100"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_count_in_requests_only_also_gets_exclusive_cores_in_limits() -> None:
    out = make_engine().admit(make_pod(container(requests={GPU: "1"})))
    ctr = out["spec"]["containers"][0]
    assert ctr["resources"] == {"requests": {GPU: "1"}, "limits": {GPUCORES: "100"}}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_memory_given_leaves_the_card_shareable() -> None:
    pod = make_pod(gpu_container(gpus=1, mem=3000))
    out = make_engine().admit(pod)
    assert limits(out) == {GPU: "1", GPUMEM: "3000"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize(("pct", "cores"), [("100", "100"), ("50", None), ("0", None)])
def test_percentage_100_is_exclusive_other_percentages_are_not(pct: str, cores: str | None) -> None:
    out = make_engine().admit(make_pod(gpu_container(pct=pct)))
    expected = {GPU: "1", GPUMEM_PCT: pct}
    if cores is not None:
        expected[GPUCORES] = cores
    assert limits(out) == expected


def test_percentage_100_wins_over_memory_for_exclusivity() -> None:
    out = make_engine().admit(make_pod(gpu_container(mem=3000, pct=100)))
    assert limits(out)[GPUCORES] == "100"


def test_explicit_cores_are_kept() -> None:
    out = make_engine().admit(make_pod(gpu_container(cores=70)))
    assert limits(out) == {GPU: "1", GPUCORES: "70"}
    # Cores given in requests count as present too.
    out = make_engine().admit(make_pod(container(limits={GPU: "1"}, requests={GPUCORES: "55"})))
    assert limits(out) == {GPU: "1"}


def test_no_memory_resource_name_means_exclusive() -> None:
    engine = make_engine({"resourceMemoryName": ""})
    assert limits(engine.admit(make_pod(container(limits={GPU: "1", GPUMEM: "3000"})))) == {
        GPU: "1", GPUMEM: "3000", GPUCORES: "100"}


def test_no_core_resource_name_writes_no_cores() -> None:
    # HAMi defaultExclusiveCoreIfNeeded returns early without a core name: no limit under an empty name.
    out = make_engine({"resourceCoreName": ""}).admit(make_pod(gpu_container()))
    assert limits(out) == {GPU: "1"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize("given", [{GPUMEM: "3000"}, {GPUCORES: "30"}, {GPUMEM_PCT: "50"}])
def test_default_gpu_num_is_inserted_when_only_memory_or_cores_are_given(given: dict[str, str]) -> None:
    out = make_engine().admit(make_pod(container(limits=given)))
    assert limits(out) == {**given, GPU: "1"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_default_gpu_num_value_and_exclusivity() -> None:
    # Percentage 100 alone: count inserted, then the card is exclusive.
    out = make_engine({"defaultGPUNum": 2}).admit(make_pod(container(limits={GPUMEM_PCT: "100"})))
    assert limits(out) == {GPUMEM_PCT: "100", GPU: "2", GPUCORES: "100"}


def test_default_gpu_num_zero_inserts_nothing() -> None:
    pod = make_pod(container(limits={GPUMEM: "3000"}))
    out = make_engine({"defaultGPUNum": 0}).admit(pod)
    assert out == pod
    assert "schedulerName" not in out["spec"]


def test_pod_without_gpus_is_left_alone() -> None:
    pod = make_pod(container(limits={"cpu": "1"}))
    assert make_engine().admit(pod) == pod


# ------------------------------------------------------------------------------------ percentage validation
@pytest.mark.parametrize("pct", ["101", "150", "-1", "50.5", "50m"])
def test_percentage_outside_0_100_fails_naming_the_container(pct: str) -> None:
    pod = make_pod(container("ok"), gpu_container("trainer", pct=pct))
    with pytest.raises(AdmissionFailed) as info:
        make_engine().admit(pod)
    assert "trainer" in str(info.value)
    assert GPUMEM_PCT in str(info.value)
    assert info.value.code == 500


def test_percentage_in_requests_is_validated_too() -> None:
    with pytest.raises(AdmissionFailed, match="trainer"):
        make_engine().admit(make_pod(container("trainer", limits={GPU: "1"}, requests={GPUMEM_PCT: "101"})))


# ------------------------------------------------------------------------------------ env
def test_priority_becomes_cuda_task_priority() -> None:
    out = make_engine().admit(make_pod(container(limits={GPU: "1", PRIORITY: "1"})))
    ctr = out["spec"]["containers"][0]
    assert env(ctr) == {"CUDA_TASK_PRIORITY": "1"}
    assert ctr["resources"]["limits"] == {GPU: "1", PRIORITY: "1", GPUCORES: "100"}


def test_priority_in_requests_only_is_ignored() -> None:
    out = make_engine().admit(make_pod(container(limits={GPU: "1"}, requests={PRIORITY: "0"})))
    assert "env" not in out["spec"]["containers"][0]


def test_core_policy_force_adds_env_to_every_container() -> None:
    pod = make_pod(gpu_container("gpu"), container("cpu"), init=[container("init")])
    out = make_engine({"gpuCorePolicy": "force"}).admit(pod)
    for ctr in (*out["spec"]["initContainers"], *out["spec"]["containers"]):
        assert env(ctr) == {"GPU_CORE_UTILIZATION_POLICY": "force"}, ctr["name"]


@pytest.mark.parametrize("policy", ["default", ""])
def test_core_policy_default_adds_no_env(policy: str) -> None:
    out = make_engine({"gpuCorePolicy": policy}).admit(make_pod(gpu_container()))
    assert "env" not in out["spec"]["containers"][0]


def test_core_policy_disable() -> None:
    out = make_engine({"gpuCorePolicy": "disable"}).admit(make_pod(gpu_container()))
    assert env(out["spec"]["containers"][0]) == {"GPU_CORE_UTILIZATION_POLICY": "disable"}


def test_overwrite_env_hides_gpus_from_containers_without_them() -> None:
    pod = make_pod(gpu_container("gpu"), container("cpu", env=[{"name": "A", "value": "1"}]),
                   init=[container("init")])
    out = make_engine({"overwriteEnv": True}).admit(pod)
    spec = out["spec"]
    assert env(spec["containers"][0]) == {}
    assert spec["containers"][1]["env"] == [{"name": "A", "value": "1"},
                                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert env(spec["initContainers"][0]) == {"NVIDIA_VISIBLE_DEVICES": "none"}


def test_overwrite_env_off_by_default() -> None:
    out = make_engine().admit(make_pod(gpu_container("gpu"), container("cpu")))
    assert "env" not in out["spec"]["containers"][1]


# ------------------------------------------------------------------------------------ pod level
def test_runtime_class_name_is_set_for_gpu_pods_only() -> None:
    engine = make_engine({"runtimeClassName": "nvidia"})
    assert engine.admit(make_pod(gpu_container()))["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in engine.admit(make_pod(container()))["spec"]
    # The user's choice is kept.
    assert engine.admit(make_pod(gpu_container(), runtimeClassName="kata"))["spec"]["runtimeClassName"] == "kata"


def test_no_runtime_class_name_configured() -> None:
    assert "runtimeClassName" not in make_engine().admit(make_pod(gpu_container()))["spec"]


def test_gpu_in_an_init_container_counts() -> None:
    out = make_engine().admit(make_pod(container("app"), init=[gpu_container("init", mem=1000)]))
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_default_scheduler_is_overwritten() -> None:
    out = make_engine().admit(make_pod(gpu_container(), schedulerName="default-scheduler"))
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_configured_scheduler_name() -> None:
    out = make_engine(scheduler={"schedulerName": "my-hami"}).admit(make_pod(gpu_container()))
    assert out["spec"]["schedulerName"] == "my-hami"


def test_pod_for_another_scheduler_is_untouched() -> None:
    pod = make_pod(gpu_container(), schedulerName="volcano")
    assert make_engine({"overwriteEnv": True, "runtimeClassName": "nvidia"}).admit(pod) == pod


def test_privileged_container_with_gpu_is_denied() -> None:
    pod = make_pod(gpu_container("gpu", mem=1000), container("sidecar", securityContext={"privileged": True}))
    with pytest.raises(AdmissionDenied) as info:
        make_engine().admit(pod)
    assert "sidecar" in str(info.value)
    assert "privileged" in str(info.value)
    assert info.value.code == 403


def test_privileged_pod_without_gpu_is_allowed() -> None:
    pod = make_pod(container("root", securityContext={"privileged": True}))
    assert make_engine().admit(pod) == pod


def test_preset_node_name_is_denied() -> None:
    with pytest.raises(AdmissionDenied, match="node assigned"):
        make_engine().admit(make_pod(gpu_container(), nodeName="gpu-node-1"))


def test_pod_without_containers_is_denied() -> None:
    pod = make_pod()
    pod["spec"]["containers"] = []
    with pytest.raises(AdmissionDenied, match="no containers"):
        make_engine().admit(pod)


# ------------------------------------------------------------------------------------ properties
ADMIT_CASES = [
    make_pod(gpu_container()),
    make_pod(gpu_container(mem=3000), container("cpu"), init=[container("init", limits={GPUMEM: "100"})]),
    make_pod(container("p", limits={GPU: "1", PRIORITY: "0"})),
    make_pod(container("x", limits={GPUMEM_PCT: "100"})),
]


@pytest.mark.parametrize("pod", ADMIT_CASES)
def test_admission_is_idempotent(pod: dict[str, Any]) -> None:
    engine = make_engine({"gpuCorePolicy": "force", "overwriteEnv": True, "runtimeClassName": "nvidia"})
    once = engine.admit(pod)
    assert engine.admit(once) == once


@pytest.mark.parametrize("pod", ADMIT_CASES)
def test_input_pod_is_not_modified(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    out = make_engine({"gpuCorePolicy": "force", "overwriteEnv": True, "runtimeClassName": "nvidia"}).admit(pod)
    assert pod == before
    assert out != pod
