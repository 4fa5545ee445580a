"""The registration pass lists pods outside the engine lock while the watch goes on applying events: a listed object
older than what the watch applied meanwhile must not overwrite it (informers compare resourceVersions the same way).

The cluster here is a :class:`MemoryCluster` whose pod list is taken, then something happens (delivered by the
in-memory watch at once), then the list is returned: exactly a list that is older than the watch by the time the pass
applies it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.sync import Sync
from hami_core.wire import keys


class SlowList(MemoryCluster):
    """``list_pods`` runs ``during()`` (once) between taking its snapshot and returning it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.during: Callable[[], None] | None = None

    def list_pods(self) -> list[dict[str, Any]]:
        snapshot = super().list_pods()
        during, self.during = self.during, None
        if during is not None:
            during()
        return snapshot


def _feed() -> tuple[SlowList, Sync, Extender]:
    cluster = SlowList(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])
    engine = make_engine()
    sync = Sync(engine, cluster)
    extender = Extender(engine, cluster, engine_lock=sync.lock)
    sync.start(background=False)
    return cluster, sync, extender


def _booked(sync: Sync) -> dict[str, str]:
    with sync.lock:
        return {b.pod: b.node for b in sync.engine.ledger.bookings.values()}


def test_a_pod_refiltered_while_the_pass_lists_stays_booked_on_its_new_node() -> None:
    cluster, sync, extender = _feed()
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    assert extender.filter({"Pod": pod, "NodeNames": ["node-a"]})["NodeNames"] == ["node-a"]
    assert _booked(sync) == {"default/p": "node-a"}

    def refilter() -> None:  # kube-scheduler filters it again (its bind failed), onto the other node
        assert extender.filter({"Pod": pod, "NodeNames": ["node-b"]})["NodeNames"] == ["node-b"]

    cluster.during = refilter
    sync.resync()
    assert cluster.get_pod("default", "p")["metadata"]["annotations"][keys.VGPU_NODE] == "node-b"
    assert _booked(sync) == {"default/p": "node-b"}
    assert sync.skipped >= 1


def test_a_pod_deleted_while_the_pass_lists_is_not_booked_again() -> None:
    cluster, sync, extender = _feed()
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    assert extender.filter({"Pod": pod, "NodeNames": ["node-a"]})["NodeNames"] == ["node-a"]
    cluster.during = lambda: cluster.delete_pod("default", "p")
    sync.resync()
    assert _booked(sync) == {}


def test_a_pod_created_again_under_its_name_while_the_pass_lists_keeps_only_the_new_one() -> None:
    cluster, sync, extender = _feed()
    old = cluster.add_pod(gpu_pod("p", mem=4000))
    assert extender.filter({"Pod": old, "NodeNames": ["node-a"]})["NodeNames"] == ["node-a"]

    def replace() -> None:
        cluster.delete_pod("default", "p")
        new = gpu_pod("p", mem=2000)
        new["metadata"]["uid"] = "uid-second"
        assert extender.filter({"Pod": cluster.add_pod(new), "NodeNames": ["node-b"]})["NodeNames"] == ["node-b"]

    cluster.during = replace
    sync.resync()
    with sync.lock:
        assert {k: b.node for k, b in sync.engine.ledger.bookings.items()} == {"uid-second": "node-b"}


def test_a_listed_pod_newer_than_the_watch_is_applied_and_the_late_event_is_skipped() -> None:
    """The other way round: the watch lags behind the list. The listed pod (newer) is applied; the lagging watch's
    older event for it, arriving afterwards, does not take it back."""
    cluster = MemoryCluster(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])
    engine = make_engine()
    sync = Sync(engine, cluster)
    events: list[tuple[str, dict[str, Any]]] = []
    cluster.watch = lambda on_node, on_pod: MemoryCluster.watch(  # type: ignore[method-assign]
        cluster, on_node, lambda event, pod: events.append((event, pod)))  # pods arrive only when the test says
    sync.start(background=False)
    engine_b = make_engine()  # another replica, writing at filter, gives the pod node-a then node-b
    ext_b = Extender(engine_b, cluster)
    for node in cluster.list_nodes():
        engine_b.upsert_node(node)
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    assert ext_b.filter({"Pod": pod, "NodeNames": ["node-a"]})["NodeNames"] == ["node-a"]
    assert ext_b.filter({"Pod": pod, "NodeNames": ["node-b"]})["NodeNames"] == ["node-b"]
    sync.resync()  # lists the pod on node-b before the watch has delivered anything
    assert _booked(sync) == {"default/p": "node-b"}
    for event, obj in events:  # the watch catches up: ADDED (no allocation), then node-a, then node-b
        sync.on_pod(event, obj)
        assert _booked(sync) == {"default/p": "node-b"}, (event, obj["metadata"]["resourceVersion"])


def test_a_pass_still_repairs_a_booking_the_extender_dropped() -> None:
    """What the pass is for, kept: a re-filter that finds no node drops the pod's reservation, while the pod keeps
    the allocation its last filter wrote (a fresh ledger books it). Nothing changed on the API server, so no watch
    event repairs it; the next pass, listing the very version the feed holds, books it again."""
    cluster, sync, extender = _feed()
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    assert extender.filter({"Pod": pod, "NodeNames": ["node-a"]})["NodeNames"] == ["node-a"]
    assert extender.filter({"Pod": pod, "NodeNames": ["cpu-only"]})["FailedNodes"] == {"cpu-only": "node unregistered"}
    assert _booked(sync) == {}
    sync.resync()
    assert _booked(sync) == {"default/p": "node-a"}
