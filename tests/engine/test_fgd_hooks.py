"""The generic extension points the ``fgd`` policy package is built on, each used by a probe plugin as any policy
would use it, and the package holding only to them (no fgd name in the engine's cycle, policy or score modules)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from core_helpers import acme, acme_device, make_node, make_pod

from hami_core.engine.scoring import ScorerDefaults
from hami_core.engine.workload import PodObservers, Shape
from hami_core.plugins.errors import PluginError
from hami_core.plugins.hookspecs import hookimpl
from hami_core.policies.fgd import plugin as fgd_plugin
from hami_core.policies.fgd.fragmentation import fgd_device_order
from hami_core.policies.fgd.plugin import engine_state

ROOT = Path(__file__).resolve().parents[2]


def test_hook_hami_policy_setup(make_engine: Any) -> None:
    seen: list[Any] = []

    class Probe:
        @hookimpl
        def hami_policy_setup(self, config: Any, state: Any) -> None:
            seen.append(config)
            state["probe"] = {"weights": dict(config.score_weights)}

        @hookimpl
        def hami_prescore_nodes(self, batch: Any) -> None:
            seen.append(batch.workload["probe"])

    engine = make_engine({"acme": {}, "scheduler": {"scoreWeights": {"x": 2}, "fgd": {"window": 7}}}, Probe())
    assert isinstance(engine.workload, PodObservers) and seen == [engine.config.scheduler]
    assert engine_state(engine).config.window == 7 and engine_state(engine).model.window == 7  # fgd reads its own
    engine.upsert_node(make_node("a", [acme_device(0)]))
    engine.schedule(make_pod("p", acme(1, 100)))
    assert seen[1] == {"weights": {"x": 2.0}}  # the state the prescore sees is the one set up


def test_hook_hami_observe_pod(make_engine: Any) -> None:
    seen: list[tuple[str, tuple[Shape, ...], tuple[int, int]]] = []

    class Probe:
        @hookimpl
        def hami_observe_pod(self, key: str, shapes: Any, host: Any, state: Any) -> None:
            seen.append((key, shapes, host))

    engine = make_engine(None, Probe())
    engine.upsert_node(make_node("a", [acme_device(0)]))
    pod = make_pod("p", acme(1, 100, 30))
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2", "memory": "1Gi"}
    engine.schedule(pod)
    engine.schedule(make_pod("cpu-only"))  # no device requested: not observed
    assert seen == [("uid-p", (Shape("ACME", 1, 30, 100),), (2000, 1024))]
    # the fgd policy counted it too
    assert [c[0] for c in engine_state(engine).current.classes] == [Shape("ACME", 1, 30, 100)]


def test_hook_hami_order_devices(make_engine: Any) -> None:
    calls: list[str] = []

    class FirstRegistered:
        """GPU policy ``first``: the device registered first is preferred (last in the fit's order)."""

        @hookimpl
        def hami_order_devices(self, node: Any, request: Any, devices: Any, ordered: Any, policy: Any) -> Any:
            calls.append(node.name)
            if not policy.has("first"):
                return None
            return sorted(ordered, key=lambda d: -d.index)

    engine = make_engine(None, FirstRegistered())
    engine.upsert_node(make_node("a", [acme_device(i) for i in range(3)]))
    spread = engine.schedule(make_pod("p", acme(1, 100)))
    first = engine.schedule(make_pod("p", acme(1, 100), annotations={"hami.io/gpu-scheduler-policy": "first"}))
    assert calls == ["a"]  # HAMi's own GPU policies never ask
    assert spread.devices["ACME"][0][0].uuid == "dev2" and first.devices["ACME"][0][0].uuid == "dev0"

    class Broken:
        @hookimpl
        def hami_order_devices(self, ordered: Any) -> Any:
            return ordered[:1]

    broken = make_engine(None, Broken())
    broken.upsert_node(make_node("a", [acme_device(i) for i in range(3)]))
    with pytest.raises(PluginError, match="hami_order_devices returned 1 devices for the 3 of node a"):
        broken.schedule(make_pod("p", acme(1, 100), annotations={"hami.io/gpu-scheduler-policy": "first"}))


def test_fgd_orders_devices_through_the_hook(make_engine: Any) -> None:
    """GPU policy fgd: the order the hook gives is :func:`fgd_device_order`'s (cached per node state)."""
    engine = make_engine({"acme": {}, "scheduler": {"gpuSchedulerPolicy": "fgd", "fgd": {"workload": [
        {"backend": "ACME", "cores": 50, "memory": 4000}, {"backend": "ACME", "cores": 100, "memory": 8000}]}}})
    engine.upsert_node(make_node("a", [acme_device(i) for i in range(3)]))
    busy = make_pod("busy", acme(1, 2000, 30))
    engine.reserve(busy, engine.schedule(busy))
    node = engine.nodes["a"]
    shape = Shape("ACME", 1, 20, 1000)
    request = engine.requests(make_pod("q", acme(1, 1000, 20))).containers[0]["ACME"]
    devices = node.devices["ACME"]
    from hami_core.engine.policy import effective_policy

    policy = effective_policy({}, node_default="binpack", gpu_default="fgd")
    from hami_core.engine.policy import sort_devices

    ordered = sort_devices(devices, [request], policy)
    state = engine.workload.snapshot()
    got = fgd_plugin.hami_order_devices(node=node, request=request, shape=shape, host=(0, 0), devices=devices,
                                        ordered=ordered, policy=policy, state=state)
    classes = engine_state(engine).current.for_backend("ACME")
    assert got == fgd_device_order(ordered, shape, classes, (np.inf, np.inf), (0, 0), policy.weights)
    assert fgd_plugin.hami_order_devices(node=node, request=request, shape=shape, host=(0, 0), devices=devices,
                                         ordered=ordered, policy=policy, state=state) is got  # cached
    binpack = effective_policy({}, node_default="binpack", gpu_default="binpack")
    assert fgd_plugin.hami_order_devices(node=node, request=request, shape=shape, host=(0, 0), devices=devices,
                                         ordered=ordered, policy=binpack, state=state) is None


def test_hook_hami_score_defaults(make_engine: Any) -> None:
    class Probe:
        """Scorer ``probe``: 0..4 points (scale 4), weighing 100 by default; it also turns HAMi's node score off."""

        HAMI_SCORER = "probe"

        @hookimpl
        def hami_prescore_nodes(self, batch: Any) -> Any:
            return np.array([4.0 if n.name == "b" else 1.0 for n in batch.nodes])

        @hookimpl
        def hami_score_defaults(self, policy: Any, state: Any) -> Any:
            return {"probe": ScorerDefaults(weight=100.0, scale=4.0), "hami": ScorerDefaults(weight=0.0)}

    def scores(weights: dict[str, float]) -> dict[str, float]:
        engine = make_engine({"acme": {}, "scheduler": {"scoreWeights": weights}}, Probe())
        for name in ("a", "b"):
            engine.upsert_node(make_node(name, [acme_device(0)]))
        return dict(engine.schedule(make_pod("p", acme(1, 100))).scores)

    assert scores({}) == {"b": 100.0, "a": 25.0}  # value / scale x weight; hami weighs 0
    assert scores({"probe": 8}) == {"b": 8.0, "a": 2.0}  # the operator's weight wins over the plugin's default


def test_no_fgd_name_in_the_core_cycle_policy_or_score_modules() -> None:
    for module in ("engine/cycle.py", "engine/policy.py", "engine/scoring.py", "default_plugins/score.py",
                   "default_plugins/policies.py", "default_plugins/__init__.py"):
        assert not re.search(r"fgd", (ROOT / "hami_core" / module).read_text(), re.IGNORECASE), module
