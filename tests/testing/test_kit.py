"""hami_core.testing: the pytest plugin's fixtures, the factories, the hook recorder and the ini opt-out."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hami_core import Engine, hookimpl
from hami_core.plugins.manager import BUILTIN_PREFIX
from hami_core.testing import HookRecorder, container, node, pod
from hami_core.testing import plugin as kit_plugin
from hami_core.wire import keys

pytest_plugins = ["pytester"]


class Tracer:
    """A plugin that remembers every bound pod."""

    __name__ = "tracer"

    def __init__(self) -> None:
        self.bound: list[str] = []

    @hookimpl
    def hami_pod_bound(self, node: str) -> None:
        self.bound.append(node)


def test_plugin_manager_holds_builtins_only(hami_plugin_manager) -> None:
    names = [name for name, _ in hami_plugin_manager.list_name_plugin()]
    assert names and all(name.startswith(BUILTIN_PREFIX) for name in names)
    assert Engine({}, plugins=hami_plugin_manager).backends == {}


def test_register_plugin_registers_for_the_test(hami_plugin_manager, register_plugin) -> None:
    tracer = Tracer()
    registration = register_plugin(tracer)
    assert registration.name == "tracer" and hami_plugin_manager.is_registered(tracer)
    hami_plugin_manager.hook.hami_pod_bound(pod={}, node="n1")
    assert tracer.bound == ["n1"]
    with register_plugin(Tracer(), name="scoped") as scoped:
        assert hami_plugin_manager.has_plugin("scoped")
    assert not hami_plugin_manager.has_plugin(scoped.name)


_kept: list[object] = []


def test_register_plugin_unregisters_at_teardown_setup(hami_plugin_manager, register_plugin) -> None:
    tracer = Tracer()
    register_plugin(tracer)
    _kept[:] = [hami_plugin_manager, tracer]


def test_register_plugin_unregisters_at_teardown_check() -> None:
    pm, tracer = _kept
    assert not pm.is_registered(tracer)


def test_make_node_and_make_pod_number_their_objects(make_node, make_pod) -> None:
    first, second = make_node(), make_node(annotations={"a": "b"}, allocatable={"acme.com/npu": 2})
    assert (first["metadata"]["name"], second["metadata"]["name"]) == ("node-1", "node-2")
    assert second["status"] == {"allocatable": {"acme.com/npu": "2"}, "capacity": {"acme.com/npu": "2"}}
    p = make_pod(make_pod.container(limits={"acme.com/npu": 1}), gpu_policy="binpack", node_policy="spread")
    assert p["metadata"]["name"] == "pod-1"
    assert p["metadata"]["annotations"] == {keys.GPU_SCHEDULER_POLICY: "binpack", keys.NODE_SCHEDULER_POLICY: "spread"}
    assert p["spec"]["containers"][0]["resources"] == {"limits": {"acme.com/npu": "1"}}


def test_factories() -> None:
    assert pod()["spec"]["containers"] == [{"name": "c", "image": "busybox"}]
    bound = pod(container("x", requests={"cpu": 1}), node_name="n1", phase="Running", init=[container("i")])
    assert bound["spec"]["nodeName"] == "n1" and bound["status"] == {"phase": "Running"}
    assert bound["spec"]["initContainers"][0]["name"] == "i"
    assert bound["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    assert node("n", unschedulable=True)["spec"] == {"unschedulable": True}
    assert node("n", capacity={"x": 1})["status"] == {"capacity": {"x": "1"}}


def test_hook_recorder_records_calls_and_results(hami_plugin_manager, hami_hook_recorder, register_plugin) -> None:
    register_plugin(Tracer())
    hami_plugin_manager.hook.hami_pod_bound(pod={"x": 1}, node="n1")
    call = hami_hook_recorder.getcall("hami_pod_bound")
    assert (call.node, call.kwargs["pod"], call.plugins) == ("n1", {"x": 1}, ("tracer",))
    assert hami_hook_recorder.names() == ["hami_pod_bound"]
    hami_hook_recorder.assert_not_called("hami_filter_nodes")
    with pytest.raises(AssertionError, match="never called"):
        hami_hook_recorder.assert_called("hami_filter_nodes")
    hami_hook_recorder.clear()
    assert hami_hook_recorder.calls == []


def test_hook_recorder_sees_a_scheduling_decision(hami_plugin_manager) -> None:
    import hami_nvidia.plugin

    hami_plugin_manager.register(hami_nvidia.plugin, name="nvidia")
    engine = Engine({"nvidia": {}}, plugins=hami_plugin_manager)
    register = json.dumps([{"id": "GPU-0", "count": 10, "devmem": 8000, "devcore": 100, "type": "NVIDIA-T4",
                            "health": True}])
    engine.upsert_node(node("n1", annotations={"hami.io/node-nvidia-register": register}))
    recorder = HookRecorder(hami_plugin_manager)
    decision = engine.schedule(pod(container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})))
    recorder.finish_recording()
    assert decision.ok
    fit = recorder.assert_called("hami_filter_nodes", times=1)[0]
    assert fit.request.memreq == 1000 and fit.result[0].ok
    assert "hami_container_request" in recorder.names()
    engine.schedule(pod(container(limits={"nvidia.com/gpu": 1})))
    assert len(recorder.getcalls("hami_filter_nodes hami_score_nodes")) == 1  # stopped recording
    recorder.finish_recording()  # idempotent


def test_hook_recorder_records_exceptions(hami_plugin_manager, hami_hook_recorder, register_plugin) -> None:
    class Boom:
        __name__ = "boom"

        @hookimpl
        def hami_pod_bound(self) -> None:
            raise RuntimeError("boom")

    register_plugin(Boom())
    with pytest.raises(RuntimeError):
        hami_plugin_manager.hook.hami_pod_bound(pod={}, node="n")
    assert isinstance(hami_hook_recorder.getcall("hami_pod_bound").exception, RuntimeError)


def test_enabled_reads_the_ini_key() -> None:
    assert kit_plugin.enabled(SimpleNamespace(getini=lambda key: True))
    assert not kit_plugin.enabled(SimpleNamespace(getini=lambda key: False))

    def undeclared(key: str) -> bool:
        raise ValueError(key)

    assert not kit_plugin.enabled(SimpleNamespace(getini=undeclared))


FIXTURE_TEST = """
def test_fixture(request):
    request.getfixturevalue("hami_plugin_manager")
"""


@pytest.mark.parametrize(("ini", "outcome"), [("", "passed"), ("hami_testing = false", "failed")])
def test_ini_key_turns_the_fixtures_off(pytester: pytest.Pytester, ini: str, outcome: str) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(FIXTURE_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(**{outcome: 1})


def test_conformance_subclass_runs_in_a_plain_project(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nhami_testing = false\n")
    pytester.makepyfile("""
        import json
        import pytest
        import hami_nvidia.plugin
        from hami_core.testing import DeviceBackendConformance, container, node, pod

        class TestNvidia(DeviceBackendConformance):
            @pytest.fixture
            def plugin_module(self):
                return hami_nvidia.plugin

            @pytest.fixture
            def device_config(self):
                return {"nvidia": {}}

            @pytest.fixture
            def device_node(self):
                cards = [{"id": f"GPU-{i}", "index": i, "count": 4, "devmem": 8000, "devcore": 100,
                          "type": "NVIDIA-T4", "health": True} for i in range(2)]
                return node("n1", annotations={"hami.io/node-nvidia-register": json.dumps(cards)})

            @pytest.fixture
            def fitting_pod(self):
                return pod(container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}))
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=11)  # the ten checks and test_dra_devices_describe_the_registration


def test_unconfigured_conformance_subclass_says_what_to_override(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from hami_core.testing import DeviceBackendConformance

        class TestNothing(DeviceBackendConformance):
            pass
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "admission")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*override the plugin_module fixture*"])
