"""End to end through the Engine: decisions, annotations, usage, score, lock (vendors.md Part I, A.4, A.6)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from kunlun_testlib import VMEM, VXPU, XPU_RES, container, kunlun_node, make_engine, pod, running, xpu_node

from hami_core.sim.loader import load_objects
from hami_core.wire import keys
from hami_kunlun.kunlun import DEVICE_IDX, KUNLUN_ALLOCATED
from hami_kunlun.xpu import XPU_ALLOCATED, XPU_TO_ALLOCATE

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "kunlun"


def test_whole_card_decision_annotations_and_booking() -> None:
    engine = make_engine()
    engine.upsert_node(kunlun_node("n1"))
    p = engine.admit(pod(container(limits={XPU_RES: 2}), name="a"))
    d = engine.schedule(p)
    assert d.node == "n1"
    assert d.annotations[KUNLUN_ALLOCATED] == "n1-kunlun-0,kunlun,98304,100:n1-kunlun-1,kunlun,98304,100:;"
    assert d.annotations[DEVICE_IDX] == "0,1"
    assert "hami.io/kunlun-devices-to-allocate" not in d.annotations
    assert not any(k.startswith("hami.io/xpu") for k in d.annotations)
    engine.reserve(p, d)
    used = [(x.used, x.usedmem, x.usedcores) for x in engine.nodes["n1"].devices["kunlun"]]
    assert used[:3] == [(1, 98304, 100), (1, 98304, 100), (0, 0, 0)]
    backend = engine.backends["kunlun"]
    assert engine.hook.hami_node_lock(backend=backend, pod=p, requests=engine.requests(p)) is None


def test_device_idx_is_the_last_container_with_cards() -> None:
    engine = make_engine()
    engine.upsert_node(kunlun_node("n1"))
    p = pod(container("a", limits={XPU_RES: 1}), container("b"), container("c", limits={XPU_RES: 1}))
    d = engine.schedule(p)
    assert d.annotations[KUNLUN_ALLOCATED] == "n1-kunlun-0,kunlun,98304,100:;;n1-kunlun-1,kunlun,98304,100:;"
    assert d.annotations[DEVICE_IDX] == "1"


def test_existing_pods_are_rebuilt_and_score_prefers_less_fragmentation() -> None:
    engine = make_engine()
    for name in ("frag", "idle"):
        engine.upsert_node(kunlun_node(name))
    engine.upsert_pod(running("old", "frag", KUNLUN_ALLOCATED, "frag-kunlun-0,kunlun,98304,100:;"))
    assert engine.nodes["frag"].devices["kunlun"][0].used == 1
    d = engine.schedule(pod(container(limits={XPU_RES: 1}), name="new"))
    # frag: previous {0}, current {1} -> delta 0 -> 2000; idle: previous {}, current {0} -> delta 2 -> 0.
    assert d.node == "frag"
    assert d.annotations[DEVICE_IDX] == "1"
    assert d.scores["frag"] - d.scores["idle"] > 1999


def test_full_node_fails_with_numa_not_fit() -> None:
    engine = make_engine()
    engine.upsert_node(kunlun_node("n1"))
    engine.upsert_pod(running("old", "n1", KUNLUN_ALLOCATED, "n1-kunlun-5,kunlun,98304,100:;"))
    d = engine.schedule(pod(container(limits={XPU_RES: 8})))
    assert d.node is None and d.failed["n1"] == "1/8 NumaNotFit"
    d = engine.schedule(pod(container(limits={XPU_RES: 9})))
    assert d.failed["n1"] == "NodeInsufficientDevice"


def test_vxpu_decision_lock_and_reserve_then_schedule() -> None:
    engine = make_engine()
    engine.upsert_node(xpu_node("x1", 2))
    pods = []
    for i in range(8):
        p = engine.admit(pod(container(limits={VXPU: 1, VMEM: 20000}), name=f"q{i}"))
        d = engine.schedule(p)
        assert d.node == "x1", d.failed
        engine.reserve(p, d)
        pods.append((p, d))
    p0, d0 = pods[0]
    value = d0.annotations[XPU_ALLOCATED]
    assert value.endswith(",XPU,24576,25:;")
    assert d0.annotations[XPU_TO_ALLOCATE] == value
    assert [(x.used, x.usedmem, x.usedcores) for x in engine.nodes["x1"].devices["XPU"]] == [(4, 98304, 100)] * 2
    d = engine.schedule(pod(container(limits={VXPU: 1, VMEM: 1})))
    assert d.failed["x1"] == "1/2 NumaNotFit"
    lock = engine.hook.hami_node_lock(backend=engine.backends["XPU"], pod=p0, requests=engine.requests(p0))
    assert lock is not None and lock.annotation == "hami.io/mutex.lock"
    init_only = pod(container(), init=[container("i", limits={VXPU: 1})])
    assert engine.hook.hami_node_lock(backend=engine.backends["XPU"], pod=init_only,
                                      requests=engine.requests(init_only)) is None


def test_vxpu_card_hosts_only_one_slice_size() -> None:
    engine = make_engine()
    engine.upsert_node(xpu_node("x1", 1))
    engine.upsert_pod(running("q", "x1", XPU_ALLOCATED, "XPU-0,XPU,24576,25:;"))
    d = engine.schedule(pod(container(limits={VXPU: 1, VMEM: 49152})))
    assert d.failed["x1"] == "1/1 NumaNotFit"
    assert engine.schedule(pod(container(limits={VXPU: 1, VMEM: 24576}))).node == "x1"
    mutex = pod(container(limits={VXPU: 1, VMEM: 24576}), annotations={keys.GPU_SCHEDULER_POLICY: "mutex"})
    assert engine.schedule(mutex).failed["x1"] == "1/1 ExclusiveDeviceAllocateConflict"


def test_examples_load_and_schedule_onto_the_example_node() -> None:
    def load(name: str, kind: str) -> list[dict]:
        return load_objects((EXAMPLES / name).read_text(encoding="utf-8"), source=name, kind=kind)

    config = yaml.safe_load((EXAMPLES / "device-config.yaml").read_text(encoding="utf-8"))
    (node,) = load("node.yaml", "Node")
    engine = make_engine(config["kunlun"])
    status = engine.upsert_node(copy.deepcopy(node))
    assert status.devices == {"kunlun": 8, "XPU": 8} and not status.errors
    placed = {}
    for raw in load("pods.yaml", "Pod"):
        p = engine.admit(raw)
        d = engine.schedule(p)
        assert d.node == "kl-node-1", (p["metadata"]["name"], d.failed)
        engine.reserve(p, d)
        placed[p["metadata"]["name"]] = d.annotations
    assert list(placed) == ["two-cards", "vxpu-quarter", "vxpu-half-pinned", "vxpu-whole"]
    assert placed["two-cards"][DEVICE_IDX] == "0,1"
    assert placed["vxpu-quarter"][XPU_ALLOCATED].endswith(",XPU,24576,25:;")
    assert placed["vxpu-half-pinned"][XPU_ALLOCATED] == "XPU-6,XPU,49152,50:;"
    assert placed["vxpu-whole"][XPU_ALLOCATED].endswith(",XPU,98304,100:;")
