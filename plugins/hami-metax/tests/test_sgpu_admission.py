"""MetaX sGPU admission: app class and QoS policy annotations (vendors G.2, TestMutateAdmission)."""

from __future__ import annotations

from typing import Any

import pytest
from metax_testlib import GPU, SGPU, backends, container, make_engine, make_pod, sgpu_container

from hami_core.plugins.errors import AdmissionFailed

QOS = "metax-tech.com/sgpu-qos-policy"
APP = "metax-tech.com/sgpu-app-class"
QOS_ERROR = "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]"
APP_ERROR = "metax-tech.com/sgpu-app-class must be set one of [online, offline]"


def pod_with(annotations: dict | None, count: str = "1") -> dict[str, Any]:
    pod = make_pod(sgpu_container("main", count=count))
    if annotations is not None:
        pod["metadata"]["annotations"] = dict(annotations)
    return pod


# The Go test table, case by case: (annotations, count, requested, error, annotations after).
@pytest.mark.parametrize(("annotations", "count", "error", "after"), [
    ({QOS: "best-effortx"}, "1", QOS_ERROR, {QOS: "best-effortx"}),                  # qos policy error
    ({}, "1", None, {QOS: "best-effort"}),                                             # no qos policy
    (None, "1", None, {QOS: "best-effort"}),                                           # pod annotation nil
    ({QOS: "burst-share"}, "1", None, {QOS: "burst-share"}),                           # qos policy fit
    ({QOS: "fixed-share"}, "1", None, {QOS: "fixed-share"}),
    ({APP: "online"}, "2", "app-class pod must request single device", {APP: "online"}),
    ({APP: "oNLine"}, "1", APP_ERROR, {APP: "oNLine"}),                                # app class verify error
    ({APP: "offline", QOS: "best-effortx"}, "1", QOS_ERROR, {APP: "offline", QOS: "best-effortx"}),
    ({APP: "online", QOS: "best-effortx"}, "1", None, {APP: "online", QOS: "best-effortx"}),
    ({APP: "online"}, "1", None, {APP: "online"}),                                     # online: no QoS added
    ({APP: "offline"}, "1", None, {APP: "offline", QOS: "best-effort"}),
])
def test_mutate_admission_table(annotations: dict | None, count: str, error: str | None, after: dict) -> None:
    _, sgpu = backends()
    pod = pod_with(annotations, count)
    ctr = pod["spec"]["containers"][0]
    if error is None:
        assert sgpu.hami_mutate_container(pod, ctr).requested is True
    else:
        with pytest.raises(AdmissionFailed) as info:
            sgpu.hami_mutate_container(pod, ctr)
        assert str(info.value) == f"container main: {error}"
        assert info.value.code == 500
    assert pod["metadata"].get("annotations") == after


def test_no_sgpu_resource_changes_nothing() -> None:
    _, sgpu = backends()
    pod = make_pod(container("main", limits={GPU: "1"}), annotations={QOS: "best-effort"})
    assert sgpu.hami_mutate_container(pod, pod["spec"]["containers"][0]).requested is False
    assert pod["metadata"]["annotations"] == {QOS: "best-effort"}
    # Only limits count for admission.
    pod = make_pod(container("main", requests={SGPU: "1"}))
    assert sgpu.hami_mutate_container(pod, pod["spec"]["containers"][0]).requested is False
    assert "annotations" not in pod["metadata"]


def test_app_class_count_is_rounded_up_like_go_value() -> None:
    _, sgpu = backends()
    pod = pod_with({APP: "online"}, count="500m")   # Quantity.Value() of 0.5 is 1
    assert sgpu.hami_mutate_container(pod, pod["spec"]["containers"][0]).requested is True


def test_engine_admission_adds_the_default_qos_once() -> None:
    engine = make_engine()
    pod = make_pod(sgpu_container("a"), sgpu_container("b", count=2), container("cpu"))
    out = engine.admit(pod)
    assert out["metadata"]["annotations"] == {QOS: "best-effort"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert out["spec"]["containers"] == pod["spec"]["containers"]   # no container mutation
    assert "annotations" not in pod["metadata"]                      # the input is untouched


def test_engine_admission_rejects_bad_annotations() -> None:
    engine = make_engine()
    with pytest.raises(AdmissionFailed, match=r"container main: metax-tech\.com/sgpu-app-class must be set"):
        engine.admit(pod_with({APP: "batch"}))
    with pytest.raises(AdmissionFailed, match="app-class pod must request single device"):
        engine.admit(pod_with({APP: "offline"}, count="2"))


def test_init_containers_are_admitted_too() -> None:
    out = make_engine().admit(make_pod(container("cpu"), init=[sgpu_container("init")]))
    assert out["metadata"]["annotations"] == {QOS: "best-effort"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"
