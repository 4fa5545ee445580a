"""``/filter`` with the same ``NodeNames`` request after request (the extender keeps the last checked list).

Over HTTP on 127.0.0.1 against the MemoryCluster: a repeated list is still checked for its type, and
cluster changes between two requests that name the same nodes are seen.
"""

from __future__ import annotations

from sched_helpers import gpu_pod, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Scheduler
from hami_core.wire.reasons import NODE_UNREGISTERED

NAMES = ["node-a", "node-b", "node-c"]


def _filter(service: Scheduler, cluster: MemoryCluster, name: str, names: object) -> tuple[int, object]:
    pod = cluster.add_pod(gpu_pod(name, mem=1000))
    status, _, result = post(service.server.url + "/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
    return status, result


def test_repeated_node_names_see_a_node_join_and_leave(service: Scheduler, cluster: MemoryCluster) -> None:
    def big(name: str) -> dict:  # fits no A10 (24 GiB), only node-c's 80 GiB cards
        status, _, result = post(service.server.url + "/filter",
                                 {"Pod": cluster.add_pod(gpu_pod(name, mem=30000)), "Nodes": None,
                                  "NodeNames": list(NAMES)})
        assert status == 200
        return result

    for name in ("p1", "p2"):  # the same list twice: the second answer comes from the cached candidate set
        result = big(name)
        assert result["NodeNames"] is None and set(result["FailedNodes"]) == set(NAMES)
        assert result["FailedNodes"]["node-c"] == NODE_UNREGISTERED
    cluster.add_node(nvidia_node("node-c", mem=81920))
    result = big("p3")
    assert result["NodeNames"] == ["node-c"] and result["Error"] == ""
    cluster.delete_node("node-c")
    result = big("p4")
    assert result["NodeNames"] is None and result["FailedNodes"]["node-c"] == NODE_UNREGISTERED


def test_node_names_are_checked_after_a_good_list(service: Scheduler, cluster: MemoryCluster) -> None:
    assert _filter(service, cluster, "ok", NAMES)[0] == 200
    for i, bad in enumerate((["node-a", 7], "node-a", [["node-a"]], {"node-a": 1}, [*NAMES, None])):
        status, text = _filter(service, cluster, f"bad-{i}", bad)
        assert status == 400 and "ExtenderArgs.NodeNames must be a list of node names" in str(text), bad
    assert _filter(service, cluster, "ok-again", NAMES)[0] == 200
