"""Admission, HAMi ``MutateAdmission`` for Iluvatar (vendors F.3, F.4) + the webhook around it (A.8)."""

from __future__ import annotations

from typing import Any

import pytest
from iluvatar_testlib import (
    ENV,
    VCORE,
    VGPU,
    VMEM,
    container,
    ilu_container,
    make_backend,
    make_engine,
    make_pod,
)

from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.testing import container_limits

#: The limits of a pod's i-th app container.
limits = container_limits


def env(pod: dict[str, Any], i: int = 0) -> list[dict[str, Any]]:
    return pod["spec"]["containers"][i].get("env", [])


# ------------------------------------------------------------------------------------ F.4 vector
def test_two_cards_have_resource_and_get_200_cores() -> None:
    pod = make_pod(ilu_container("trainer", gpus=2))
    ctr = pod["spec"]["containers"][0]
    assert make_backend().hami_mutate_container(pod, ctr).requested is True
    assert ctr["resources"]["limits"] == {VGPU: "2", VCORE: "200"}


def test_admitted_multi_card_pod() -> None:
    out = make_engine().admit(make_pod(ilu_container("trainer", gpus=2, mem=64, cores=30)))
    assert limits(out) == {VGPU: "2", VMEM: "64", VCORE: "200"}
    assert env(out) == [{"name": ENV, "value": "trainer"}]
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_count_rounds_up_like_quantity_value() -> None:
    out = make_engine().admit(make_pod(container("c", limits={VGPU: "3k"})))
    assert limits(out)[VCORE] == "300000"
    out = make_engine().admit(make_pod(container("c", limits={VGPU: "1500m"})))
    assert limits(out)[VCORE] == "200"


def test_one_card_keeps_its_cores() -> None:
    out = make_engine().admit(make_pod(ilu_container("c", gpus=1, mem=16, cores=30)))
    assert limits(out) == {VGPU: "1", VMEM: "16", VCORE: "30"}
    out = make_engine().admit(make_pod(ilu_container("c", gpus=1)))
    assert limits(out) == {VGPU: "1"}


# ------------------------------------------------------------------------------------ container name env
def test_container_name_env_is_appended() -> None:
    ctr = ilu_container("worker", env=[{"name": "A", "value": "1"}])
    out = make_engine().admit(make_pod(ctr))
    assert env(out) == [{"name": "A", "value": "1"}, {"name": ENV, "value": "worker"}]


def test_existing_env_is_kept() -> None:
    ctr = ilu_container("worker", env=[{"name": ENV, "value": "custom"}])
    out = make_engine().admit(make_pod(ctr))
    assert env(out) == [{"name": ENV, "value": "custom"}]


def test_admission_is_idempotent() -> None:
    engine = make_engine()
    once = engine.admit(make_pod(ilu_container("w", gpus=2)))
    assert engine.admit(once) == once


def test_unnamed_container_gets_no_env() -> None:
    pod = make_pod(ilu_container("x", gpus=2))
    ctr = pod["spec"]["containers"][0]
    del ctr["name"]
    assert make_backend().hami_mutate_container(pod, ctr).requested is True
    assert "env" not in ctr
    assert ctr["resources"]["limits"][VCORE] == "200"


def test_each_container_gets_its_own_name() -> None:
    pod = make_pod(container("sidecar"), ilu_container("a"), ilu_container("b", chip="BI-V150"),
                   init=[ilu_container("setup")])
    out = make_engine().admit(pod)
    assert out["spec"]["initContainers"][0]["env"] == [{"name": ENV, "value": "setup"}]
    assert "env" not in out["spec"]["containers"][0]
    assert env(out, 1) == [{"name": ENV, "value": "a"}]
    assert env(out, 2) == [{"name": ENV, "value": "b"}]


def test_container_asking_two_chips_gets_the_env_once() -> None:
    ctr = container("both", limits={VGPU: "1", "iluvatar.ai/BI-V150-vgpu": "2"})
    out = make_engine().admit(make_pod(ctr))
    assert env(out) == [{"name": ENV, "value": "both"}]
    assert limits(out) == {VGPU: "1", "iluvatar.ai/BI-V150-vgpu": "2", "iluvatar.ai/BI-V150.vCore": "200"}


# ------------------------------------------------------------------------------------ what counts
def test_count_only_in_requests_is_not_a_request_at_admission() -> None:
    pod = make_pod(container("c", requests={VGPU: "2"}))
    out = make_engine().admit(pod)
    assert out == pod
    assert "schedulerName" not in out["spec"]


def test_memory_or_cores_without_count_change_nothing() -> None:
    pod = make_pod(container("c", limits={VMEM: "64", VCORE: "50"}))
    assert make_engine().admit(pod) == pod


def test_other_chips_do_not_touch_the_container() -> None:
    pod = make_pod(ilu_container("c", gpus=2))
    ctr = pod["spec"]["containers"][0]
    assert make_backend("BI-V150").hami_mutate_container(pod, ctr).requested is False
    assert ctr == ilu_container("c", gpus=2)


def test_chip_without_core_resource_writes_no_cores() -> None:
    engine = make_engine([{"chipName": "MR-V100", "resourceCoreName": ""}])
    out = engine.admit(make_pod(ilu_container("c", gpus=2)))
    assert limits(out) == {VGPU: "2"}
    assert env(out) == [{"name": ENV, "value": "c"}]


def test_pod_without_iluvatar_is_left_alone() -> None:
    pod = make_pod(container("c", limits={"cpu": "1", "nvidia.com/gpu": "1"}))
    assert make_engine().admit(pod) == pod


# ------------------------------------------------------------------------------------ webhook denials
def test_privileged_pod_with_iluvatar_is_denied() -> None:
    pod = make_pod(ilu_container("c"), container("p", securityContext={"privileged": True}), name="priv")
    with pytest.raises(AdmissionDenied, match="container p is privileged"):
        make_engine().admit(pod)


def test_pod_with_node_name_is_denied() -> None:
    with pytest.raises(AdmissionDenied, match="pod has node assigned"):
        make_engine().admit(make_pod(ilu_container("c"), nodeName="n1"))


def test_unreadable_count_fails_naming_container_and_resource() -> None:
    with pytest.raises(AdmissionFailed) as info:
        make_engine().admit(make_pod(ilu_container("trainer", gpus="two")))
    assert "trainer" in str(info.value)
    assert VGPU in str(info.value)


def test_zero_count_in_limits_is_has_resource_but_requests_nothing() -> None:
    # HAMi returns "has resource" whenever the count is in limits; the request generator then drops it.
    engine = make_engine()
    out = engine.admit(make_pod(ilu_container("c", gpus=0)))
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert env(out) == [{"name": ENV, "value": "c"}]
    assert engine.requests(out).empty
