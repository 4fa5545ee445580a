"""PodDisruptionBudget violations counted as kube-scheduler's filterPodsWithPDBViolation counts them."""

from __future__ import annotations

from hami_core.scheduler.pdb import selector_matches, violations


def pod(name: str, labels: dict | None, namespace: str = "default") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}}}


def pdb(allowed: int, selector: dict | None, namespace: str = "default", disrupted: dict | None = None) -> dict:
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted or {}}}


def test_selectors() -> None:
    labels = {"app": "a", "tier": "gpu"}
    assert selector_matches({"matchLabels": {"app": "a"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "b"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, labels)
    assert not selector_matches({}, labels) and not selector_matches(None, labels)  # empty matches nothing here
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, labels)


def test_each_victim_takes_one_disruption_in_order() -> None:
    budget = pdb(1, {"matchLabels": {"app": "a"}})
    assert violations([pod("x", {"app": "a"}), pod("y", {"app": "a"})], [budget]) == [False, True]


def test_other_namespaces_unlabelled_and_already_disrupted_pods_take_none() -> None:
    budget = pdb(0, {"matchLabels": {"app": "a"}}, disrupted={"z": "2026-01-01T00:00:00Z"})
    assert violations([pod("x", {"app": "a"}, "other"), pod("u", None), pod("z", {"app": "a"})], [budget]) == [
        False, False, False]
    assert violations([pod("x", {"app": "a"})], [budget]) == [True]
