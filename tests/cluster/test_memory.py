"""MemoryCluster: the in-process Cluster (resourceVersion CAS, merge patches, bind, watches, events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_core.cluster.base import ConflictError, NotFoundError
from hami_core.cluster.memory import MemoryCluster, merge_patch
from hami_core.plugins.errors import HamiError


def _node(name: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "annotations": {"a": "1"}}}


def _pod(name: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}}


def test_merge_patch_rfc7386() -> None:
    doc = {"a": {"b": 1, "c": 2}, "d": [1]}
    assert merge_patch(doc, {"a": {"b": None, "e": 3}, "d": [2], "f": "x"}) == {"a": {"c": 2, "e": 3}, "d": [2],
                                                                               "f": "x"}


def test_cas_patch_and_conflict() -> None:
    cluster = MemoryCluster([_node("n")])
    rv = cluster.get_node("n")["metadata"]["resourceVersion"]
    out = cluster.patch_node("n", {"metadata": {"annotations": {"lock": "x"}, "resourceVersion": rv}})
    assert out["metadata"]["annotations"] == {"a": "1", "lock": "x"} and out["metadata"]["resourceVersion"] != rv
    with pytest.raises(ConflictError, match="has been modified"):
        cluster.patch_node("n", {"metadata": {"annotations": {"lock": "y"}, "resourceVersion": rv}})
    cluster.patch_node("n", {"metadata": {"annotations": {"lock": None}}})
    assert cluster.get_node("n")["metadata"]["annotations"] == {"a": "1"}
    with pytest.raises(NotFoundError):
        cluster.patch_node("ghost", {})


def test_bind_watch_and_events() -> None:
    cluster = MemoryCluster([_node("n")], [_pod("p")])
    seen: list[tuple[str, str, str]] = []
    cluster.watch(lambda e, o: seen.append(("node", e, o["metadata"]["name"])),
                  lambda e, o: seen.append(("pod", e, o["metadata"]["name"])))
    uid = cluster.get_pod("ns", "p")["metadata"]["uid"]
    cluster.bind("ns", "p", uid, "n")
    assert cluster.get_pod("ns", "p")["spec"]["nodeName"] == "n"
    with pytest.raises(ConflictError, match="already assigned"):
        cluster.bind("ns", "p", uid, "n")
    cluster.delete_pod("ns", "p")
    assert seen == [("node", "ADDED", "n"), ("pod", "ADDED", "p"), ("pod", "MODIFIED", "p"), ("pod", "DELETED", "p")]
    cluster.event(_pod("p"), "Warning", "FilteringFailed", "no available node")
    assert cluster.events[0]["reason"] == "FilteringFailed"


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kind: List\nitems:\n- kind: Node\n  metadata: {name: n1}\n- kind: Pod\n  metadata: {name: p1}\n"
                    "---\nkind: ConfigMap\nmetadata: {name: ignored}\n")
    cluster = MemoryCluster.from_file(path)
    assert [n["metadata"]["name"] for n in cluster.list_nodes()] == ["n1"]
    assert cluster.get_pod("default", "p1")["metadata"]["uid"]
    with pytest.raises(HamiError, match="cannot read cluster file"):
        MemoryCluster.from_file(tmp_path / "absent.yaml")


def test_pods_on_node_follows_binds_patches_replacements_and_deletes() -> None:
    """The node index (the API server's ``spec.nodeName`` field selector) stays right through every write."""
    cluster = MemoryCluster(pods=[_pod("a"), _pod("b"), {**_pod("c"), "spec": {"nodeName": "n1"}}])

    def on(node: str) -> list[str]:
        return [p["metadata"]["name"] for p in cluster.pods_on_node(node)]

    assert on("n1") == ["c"] and on("n2") == []
    cluster.bind("ns", "a", "", "n1")
    cluster.patch_pod("ns", "b", {"spec": {"nodeName": "n2"}})
    assert on("n1") == ["a", "c"] and on("n2") == ["b"]
    cluster.patch_pod("ns", "c", {"spec": {"nodeName": "n2"}})  # moved by a patch
    cluster.patch_pod("ns", "a", {"spec": {"nodeName": None}})  # unset
    assert on("n1") == [] and on("n2") == ["b", "c"]
    cluster.add_pod({**_pod("b"), "spec": {"nodeName": "n3"}})  # replaced by a new object elsewhere
    cluster.delete_pod("ns", "c")
    assert on("n2") == [] and on("n3") == ["b"]
    assert on("n3") == [p["metadata"]["name"] for p in cluster.list_pods()
                        if (p.get("spec") or {}).get("nodeName") == "n3"]


class _Tagged(dict):  # not something marshal can copy
    pass


def test_objects_are_copied_in_and_out_even_when_marshal_cannot() -> None:
    pod = {**_pod("a"), "extra": _Tagged(k=[1, {"x": 2}])}
    cluster = MemoryCluster(pods=[pod])
    pod["extra"]["k"].append(3)  # the caller's object is not the stored one
    out = cluster.get_pod("ns", "a")
    assert out["extra"] == {"k": [1, {"x": 2}]}
    out["extra"]["k"][1]["x"] = 99  # nor is what a read returns
    plain = cluster.get_pod("ns", "a")
    assert plain["extra"]["k"][1] == {"x": 2} and plain["spec"] == {"containers": [{"name": "c"}]}
    plain["spec"]["containers"][0]["name"] = "changed"
    assert cluster.get_pod("ns", "a")["spec"]["containers"][0]["name"] == "c"
