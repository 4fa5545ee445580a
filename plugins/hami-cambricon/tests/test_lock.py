"""Cambricon's own node lock ``cambricon.com/dsmlu.lock`` (vendors D.6, D.7; scheduler §8.2)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cambricon_testlib import LOCK, T0, container, make_engine, make_node, make_pod, mlu_container

from hami_cambricon import backend as mlu
from hami_core.plugins.errors import TemporaryError, WireFormatError
from hami_core.plugins.types import LockSpec
from hami_core.wire.lock import decode_lock_time, encode_lock_time


def rfc3339(t: float) -> str:
    return encode_lock_time(datetime.fromtimestamp(t, tz=UTC))


def locked_node(value: str | None) -> dict:
    return make_node("n1", cores=100, vmemory=192, annotations=None if value is None else {LOCK: value})


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


# ------------------------------------------------------------------------------------ device_test.go Test_LockNode
def test_not_locked_sets_the_lock_to_now() -> None:
    patch = mlu.acquire_lock(locked_node(None), T0)
    assert list(patch) == [LOCK]
    assert decode_lock_time(patch[LOCK]).timestamp() == T0


def test_locked_within_two_minutes_is_an_error() -> None:
    with pytest.raises(TemporaryError, match=r"^node n1 has been locked within 2 minutes$"):
        mlu.acquire_lock(locked_node(rfc3339(T0 - 60)), T0)


def test_exactly_two_minutes_is_still_locked() -> None:
    with pytest.raises(TemporaryError):
        mlu.acquire_lock(locked_node(rfc3339(T0 - 120)), T0)


def test_expired_lock_is_taken_over() -> None:
    patch = mlu.acquire_lock(locked_node(rfc3339(T0 - 3600)), T0)
    assert decode_lock_time(patch[LOCK]).timestamp() == T0


def test_lock_with_an_offset_is_read() -> None:
    with pytest.raises(TemporaryError):
        mlu.acquire_lock(locked_node("2025-06-15T23:05:00+08:00"), datetime(2025, 6, 15, 15, 6, tzinfo=UTC).timestamp())


def test_invalid_lock_time_is_an_error_naming_the_annotation() -> None:
    with pytest.raises(WireFormatError, match=r"^cambricon\.com/dsmlu\.lock: invalid RFC3339 time \"invalid-format\""):
        mlu.acquire_lock(locked_node("invalid-format"), T0)


def test_hamis_owned_lock_format_is_not_a_cambricon_lock() -> None:
    with pytest.raises(WireFormatError):
        mlu.acquire_lock(locked_node(rfc3339(T0) + ",default,p"), T0)


# ------------------------------------------------------------------------------------ Test_ReleaseNodeLock
def test_release_removes_the_lock_whoever_holds_it() -> None:
    assert mlu.release_lock(locked_node(rfc3339(T0))) == {LOCK: None}


def test_release_without_lock_does_nothing() -> None:
    assert mlu.release_lock(locked_node(None)) == {}
    assert mlu.release_lock(make_node("n1", annotations={"test": "test123"})) == {}
