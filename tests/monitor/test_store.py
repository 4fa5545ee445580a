"""Pods from the cluster and garbage collection of dead pods' directories."""

from __future__ import annotations

import os
import time
from pathlib import Path

from monitor_helpers import pod, write_region

from hami_core.cluster.memory import MemoryCluster
from hami_core.monitor.store import ContainerStore, PodIndex

U0 = "GPU-00000000-1111-2222-3333-444444444444"


class FailingCluster:
    def list_pods(self) -> list[dict]:
        raise ConnectionError("API down")


def test_pod_index_filters_by_node_and_relists_on_a_miss() -> None:
    now = [0.0]
    cluster = MemoryCluster(pods=[pod("a", "uid-a", ["c"]), pod("b", "uid-b", ["c"], node="node-b")])
    labelled = pod("l", "uid-l", ["c"], node="")
    labelled["metadata"]["labels"] = {"hami.io/vgpu-node": "node-a"}
    cluster.add_pod(labelled)
    index = PodIndex(cluster, "node-a", resync_s=30, miss_relist_s=5, clock=lambda: now[0])
    assert index.alive_uids() is None
    index.refresh()
    assert index.alive_uids() == {"uid-a", "uid-l"}
    cluster.add_pod(pod("n", "uid-n", ["c"]))
    assert index.lookup("uid-n") is None          # listed just now: no relist yet
    now[0] = 6
    assert index.lookup("uid-n")["metadata"]["name"] == "n"


def test_pod_index_keeps_its_view_when_listing_fails() -> None:
    index = PodIndex(FailingCluster(), "node-a")
    index.refresh()
    assert index.alive_uids() is None             # never listed: no garbage collection


def test_dead_pods_dirs_are_removed_after_the_grace_period(tmp_path: Path) -> None:
    write_region(tmp_path, "alive", "c", uuids=[U0])
    dead = write_region(tmp_path, "dead", "c", uuids=[U0]).parent
    fresh = write_region(tmp_path, "fresh", "c", uuids=[U0]).parent
    old = time.time() - 600
    os.utime(dead, (old, old))
    store = ContainerStore(tmp_path, gc_after_s=300)
    store.refresh()                               # no pod list: nothing removed
    assert sorted(store.entries) == ["alive_c", "dead_c", "fresh_c"]
    store.refresh({"alive"})
    assert sorted(store.entries) == ["alive_c", "fresh_c"]
    assert not dead.exists() and fresh.exists()
    store.close()
