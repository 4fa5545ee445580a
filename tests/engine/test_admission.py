"""Engine.admit: the mutating webhook's algorithm (spec §4.3), vendor-neutral parts."""

from __future__ import annotations

import pytest
from core_helpers import acme, container, make_pod

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import AdmissionDenied


def test_sets_scheduler_name_only_for_managed_pods(engine: Engine) -> None:
    gpu = make_pod("p", acme(1, 1000))
    gpu["spec"]["schedulerName"] = "default-scheduler"
    admitted = engine.admit(gpu)
    assert admitted["spec"]["schedulerName"] == "hami-scheduler"
    assert gpu["spec"]["schedulerName"] == "default-scheduler"  # input untouched
    plain = engine.admit(make_pod("web", container("nginx")))
    assert "schedulerName" not in plain["spec"]


def test_foreign_scheduler_is_left_alone(engine: Engine) -> None:
    pod = make_pod("p", acme(1, 1000))
    pod["spec"]["schedulerName"] = "volcano"
    assert engine.admit(pod) == pod


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda p: p["spec"].update(containers=[]), "pod has no containers"),
    (lambda p: p["spec"]["containers"][0].update(securityContext={"privileged": True}), "container c is privileged"),
    (lambda p: p["spec"].update(nodeName="n1"), "pod has node assigned"),
])
def test_denials(engine: Engine, mutate, message: str) -> None:
    pod = make_pod("p", acme(1, 1000))
    mutate(pod)
    with pytest.raises(AdmissionDenied, match=message):
        engine.admit(pod)


def test_privileged_pod_without_devices_is_allowed(engine: Engine) -> None:
    pod = make_pod("p", {"name": "c", "securityContext": {"privileged": True}})
    assert engine.admit(pod)["spec"]["containers"][0]["securityContext"]["privileged"] is True
