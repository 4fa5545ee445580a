"""Property: over random interleavings of filter (schedule + reserve), bind, Allocate, delete, finish, lost and
failed writes and replica restarts, by two scheduler replicas on one cluster, no device is ever over its memory,
cores or split count, and every replica's ledger equals the one rebuilt from the cluster's state.

Runs on :class:`MemoryCluster` (synchronous watches) for speed; each replica sees the shared store through its
own :class:`~reliability.rel_helpers.ReplicaView` (an in-test stand-in), so closing one replica does not silence
the other.
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability.rel_helpers import MemoryReplica, check_capacity, device_usage, kubelet_ids, ledger_view
from scheduler.sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.base import NotFoundError
from hami_core.cluster.memory import MemoryCluster
from hami_core.engine.pods import annotations
from hami_core.node.allocate import AllocateError, Allocator
from hami_core.wire import keys

NODES = ["n0", "n1"]
PODS = [gpu_pod(f"p{i}", mem=m, cores=c) for i, (m, c) in enumerate(
    [(6000, 30), (9000, 50), (4000, 0), (12000, 60), (3000, 20), (8000, 40)])]


OPS = st.lists(st.tuples(st.sampled_from(["filter", "bind", "allocate", "delete", "finish", "restart", "fail",
                                          "lose", "recreate"]),
                         st.integers(0, len(PODS) - 1), st.integers(0, 1)), max_size=40)


def _uid(i: int) -> str:
    return f"uid-default-p{i}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_random_interleavings_keep_the_invariant(ops: list[tuple[str, int, int]]) -> None:
    store = MemoryCluster(nodes=[nvidia_node(n, gpus=2, mem=16000) for n in NODES], pods=PODS)
    replicas = [MemoryReplica(store), MemoryReplica(store)]
    dp = Allocator(store, "", make_engine().backends["NVIDIA"], lambda *a: object())
    generation = dict.fromkeys(range(len(PODS)), 0)
    for op, i, r in ops:
        replica = replicas[r]
        name = f"p{i}"
        pod = store.pods.get(("default", name))
        if op == "filter" and pod is not None and not pod["spec"].get("nodeName"):
            replica.extender.filter({"Pod": pod, "NodeNames": NODES})
            replica.view.fault = ""  # a fault armed for this replica lasts one extender call
        elif op == "bind" and pod is not None and annotations(pod).get(keys.VGPU_NODE) and not pod["spec"].get(
                "nodeName"):
            replica.extender.bind({"PodName": name, "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                                   "Node": annotations(pod)[keys.VGPU_NODE]})
            replica.view.fault = ""
        elif op == "allocate" and pod is not None and pod["spec"].get("nodeName"):
            dp.node_name = pod["spec"]["nodeName"]
            # no pod binding on that node (the lock names another or a deleted pod, or it is done): an error
            with contextlib.suppress(AllocateError, NotFoundError):
                dp.allocate(kubelet_ids(pod)[:1] or [["GPU-0"]])  # kubelet's IDs: the first container's booking
        elif op == "delete" and pod is not None:
            store.delete_pod("default", name)
        elif op == "recreate" and pod is None:
            generation[i] += 1
            fresh = gpu_pod(name, mem=PODS[i]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"])
            fresh["metadata"]["uid"] = f"{_uid(i)}-{generation[i]}"
            store.add_pod(fresh)
        elif op == "finish" and pod is not None and pod["spec"].get("nodeName"):
            store.add_pod({**pod, "status": {"phase": "Succeeded"}})
        elif op == "restart":
            replica.stop()
            replicas[r] = MemoryReplica(store)
        elif op in ("fail", "lose"):
            replica.view.fault = op

        rebuilt = make_engine()
        for node in store.list_nodes():
            rebuilt.upsert_node(node)
        for stored in store.list_pods():
            rebuilt.upsert_pod(stored)
        assert check_capacity(rebuilt) == [], (op, i, r)
        for each in replicas:
            assert check_capacity(each.engine) == []
            assert ledger_view(each.engine) == ledger_view(rebuilt), (op, i, r)
            assert device_usage(each.engine) == device_usage(rebuilt), (op, i, r)
        for stored in store.list_pods():
            node = stored["spec"].get("nodeName")
            assert not node or annotations(stored).get(keys.VGPU_NODE) in (None, node)
