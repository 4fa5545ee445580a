"""Requeue nudges: a release hami sees after it refused pending pods is announced on the Node (a cluster event
that makes kube-scheduler retry extender-refused pods), coalesced, and never written without waiting pods."""

from __future__ import annotations

import time

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.requeue import MAX_REFUSED, RELEASED_ANNOTATION, RequeueNudger


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[{"metadata": {"name": "n1", "annotations": {}}},
                                {"metadata": {"name": "n2", "annotations": {}}}])


def _stamp(cluster: MemoryCluster, node: str) -> str | None:
    return (cluster.get_node(node)["metadata"].get("annotations") or {}).get(RELEASED_ANNOTATION)


def test_release_after_refusal_writes_the_node_annotation() -> None:
    cluster = _cluster()
    nudger = RequeueNudger(cluster, clock=Clock(), wall=lambda: 1_700_000_000.25)
    nudger.refused("ns/p")
    nudger.released("n2")
    assert nudger.flush() is True
    assert _stamp(cluster, "n2") == "2023-11-14T22:13:20.250000Z"
    assert _stamp(cluster, "n1") is None
    assert nudger.nudges == 1
    assert nudger.flush() is False  # nothing pending any more


def test_no_waiting_pod_no_write() -> None:
    cluster = _cluster()
    nudger = RequeueNudger(cluster, clock=Clock())
    nudger.released("n1")  # nobody refused
    nudger.refused("ns/p")
    nudger.settled("ns/p")  # bound meanwhile
    nudger.released("n1")
    assert nudger.flush() is False
    assert _stamp(cluster, "n1") is None


def test_one_nudge_requeues_everyone_refused_before_it() -> None:
    cluster = _cluster()
    nudger = RequeueNudger(cluster, clock=Clock())
    for i in range(5):
        nudger.refused(f"ns/p{i}")
    nudger.released("n1")
    nudger.released("n2")  # joins the pending nudge: the refused pods are requeued by it already
    assert nudger.flush() is True and nudger.flush() is False
    assert _stamp(cluster, "n1") is not None and _stamp(cluster, "n2") is None
    nudger.released("n1")  # everyone refused was requeued by that nudge: a new release needs a new refusal
    assert nudger.flush() is False


def test_background_writer_coalesces_to_the_interval() -> None:
    cluster = _cluster()
    nudger = RequeueNudger(cluster, min_interval_s=0.3).start()
    try:
        started = time.monotonic()
        for _ in range(20):  # a storm of releases and refusals
            nudger.refused("ns/p")
            nudger.released("n1")
            time.sleep(0.01)
        deadline = time.monotonic() + 5
        while nudger.nudges < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        # one at once, then at most one per 0.3 s while the storm lasts
        assert 2 <= nudger.nudges <= 1 + int(elapsed / 0.3) + 1
    finally:
        nudger.stop()


def test_a_failed_write_is_logged_not_raised(caplog) -> None:
    class Broken(MemoryCluster):
        def patch_node(self, name, patch):  # type: ignore[no-untyped-def]
            raise ConnectionError("apiserver down")

    nudger = RequeueNudger(Broken(), clock=Clock())
    nudger.refused("ns/p")
    nudger.released("gone")
    assert nudger.flush() is False
    assert "requeue nudge on node gone failed" in caplog.text and "5-minute flush" in caplog.text


def test_refused_pods_are_bounded() -> None:
    nudger = RequeueNudger(_cluster(), clock=Clock())
    for i in range(MAX_REFUSED + 10):
        nudger.refused(f"ns/p{i}")
    assert len(nudger._refused) == MAX_REFUSED
    assert "ns/p0" not in nudger._refused and f"ns/p{MAX_REFUSED + 9}" in nudger._refused


def test_the_extender_nudges_after_a_release_it_learns_late() -> None:
    """The e2e race: kube-scheduler retried the waiting pod before hami saw the holder go; hami refused it; the
    holder's deletion then reaches hami, and the nudge makes kube-scheduler ask again."""
    from sched_helpers import gpu_pod, make_engine, nvidia_node

    from hami_core.scheduler.extender import Extender

    cluster = MemoryCluster(nodes=[nvidia_node("n1", gpus=1)])
    engine = make_engine()
    engine.upsert_node(cluster.get_node("n1"))
    ext = Extender(engine, cluster)
    assert ext.nudger is not None
    holder = cluster.add_pod(gpu_pod("holder", mem=24576))
    assert ext.filter({"Pod": holder, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    waiting = cluster.add_pod(gpu_pod("waiting", mem=24576))
    refused = ext.filter({"Pod": waiting, "NodeNames": ["n1"]})
    assert not refused["NodeNames"] and "n1" in refused["FailedNodes"]

    holder = cluster.get_pod("default", "holder")  # as filter annotated it (hami.io/vgpu-node)
    ext.on_pod_event("DELETED", holder)  # what hami's Pod watch delivers once the holder's object is gone
    assert ext.nudger.flush() is True
    assert _stamp(cluster, "n1") is not None

    ext.on_pod_event("DELETED", waiting)
    ext.on_pod_event("DELETED", holder)
    assert ext.nudger.flush() is False  # nobody refused is waiting any more


def test_nudges_can_be_turned_off() -> None:
    from sched_helpers import make_engine

    from hami_core.scheduler.extender import Extender

    assert Extender(make_engine(), _cluster(), requeue_nudge_s=0).nudger is None
