"""Cambricon's own node lock ``cambricon.com/dsmlu.lock`` (vendors D.6, D.7; scheduler §8.2)."""

from __future__ import annotations

from cambricon_testlib import container, make_engine, make_pod, mlu_container

from hami_core.plugins.types import LockSpec


# ------------------------------------------------------------------------------------ the hook
def test_mlu_pod_takes_cambricons_time_only_lock() -> None:
    engine = make_engine()
    pod = make_pod(container("sidecar"), mlu_container())
    spec = engine.hook.hami_node_lock(backend=engine.backends["MLU"], pod=pod, requests=engine.requests(pod))
    assert spec == LockSpec("cambricon.com/dsmlu.lock", owned=False, expiry_s=120.0)


def test_init_only_mlu_pod_takes_no_lock() -> None:
    # HAMi's LockNode walks Spec.Containers only.
    engine = make_engine()
    pod = make_pod(container("app"), init=[mlu_container("init")])
    assert engine.hook.hami_node_lock(backend=engine.backends["MLU"], pod=pod, requests=engine.requests(pod)) is None


def test_pod_without_mlu_takes_no_lock() -> None:
    engine = make_engine()
    pod = make_pod(container(limits={"cpu": "1"}))
    assert engine.hook.hami_node_lock(backend=engine.backends["MLU"], pod=pod, requests=engine.requests(pod)) is None
