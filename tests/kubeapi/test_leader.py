"""LeaderElector against the fake API server, with a fake clock."""

from __future__ import annotations

import threading
from typing import Any

from kubeapi.fake_apiserver import FakeApiServer

from hami_core.cluster.leader import LeaderElector


def electors(api_client: Any, clock: list[float], *ids: str, **kw: Any) -> list[LeaderElector]:
    return [LeaderElector(api_client, namespace="kube-system", name="hami-scheduler", identity=i,
                          clock=lambda: clock[0], **kw) for i in ids]


def test_only_one_leader_and_takeover_after_expiry(server: FakeApiServer, api_client: Any) -> None:
    clock = [1000.0]
    a, b = electors(api_client, clock, "a", "b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    lease = server.get("leases", "kube-system", "hami-scheduler")
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 15
    for _ in range(5):  # a renews; b never wins while a does
        clock[0] += 2
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False
        assert not (a.is_leader() and b.is_leader())
    clock[0] += 11  # a stopped renewing: past renew_deadline it no longer claims; the lease is not expired yet
    assert a.is_leader() is False
    assert b.try_acquire_or_renew() is False
    clock[0] += 5  # lease_duration since b last saw the record change: b takes over
    assert b.try_acquire_or_renew() is True
    assert a.try_acquire_or_renew() is False
    spec = server.get("leases", "kube-system", "hami-scheduler")["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


def test_concurrent_candidates_never_both_lead(server: FakeApiServer, api_client: Any) -> None:
    clock = [0.0]
    cands = electors(api_client, clock, "a", "b", "c", "d")
    barrier = threading.Barrier(len(cands))
    results: dict[str, bool] = {}

    def go(e: LeaderElector) -> None:
        barrier.wait()
        results[e.identity] = e.try_acquire_or_renew()

    for _ in range(3):
        threads = [threading.Thread(target=go, args=(e,)) for e in cands]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(results.values()) == 1
        assert sum(e.is_leader() for e in cands) == 1
        clock[0] += 100  # everything expires: a fresh race each round (CAS decides)


def test_release_lets_another_take_over_at_once(server: FakeApiServer, api_client: Any) -> None:
    clock = [0.0]
    a, b = electors(api_client, clock, "a", "b")
    assert a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader()
    assert b.try_acquire_or_renew() is True


def test_run_loop_and_stop(server: FakeApiServer, api_client: Any) -> None:
    import time

    changes: list[bool] = []
    (e,) = [LeaderElector(api_client, namespace="ns", name="l", identity="me", retry_period_s=0.05,
                          on_change=changes.append)]
    stop = threading.Event()
    t = threading.Thread(target=e.run, args=(stop,))
    t.start()
    deadline = time.monotonic() + 3
    while not e.is_leader() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert e.is_leader()
    stop.set()
    t.join(3)
    assert not t.is_alive() and not e.is_leader() and changes == [True, False]
    assert "holderIdentity" not in server.get("leases", "ns", "l")["spec"]


def test_follow_mode_tracks_kube_scheduler_lease(server: FakeApiServer, api_client: Any) -> None:
    clock = [0.0]
    server.create("leases", "kube-system", {"metadata": {"name": "hami-scheduler"},
                                            "spec": {"holderIdentity": "host-1_abc", "leaseDurationSeconds": 15}})
    (mine,) = electors(api_client, clock, "host-1", campaign=False)
    (other,) = electors(api_client, clock, "host-2", campaign=False)
    assert mine.try_acquire_or_renew() is True and other.try_acquire_or_renew() is False
    clock[0] += 20  # the holder stopped renewing
    assert mine.try_acquire_or_renew() is False
    assert server.get("leases", "kube-system", "hami-scheduler")["spec"]["holderIdentity"] == "host-1_abc"
