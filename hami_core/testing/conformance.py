"""The contract every device backend keeps, as a pytest base class (a port of HAMi's Go ``conformance.Run``).

A vendor subclasses :class:`DeviceBackendConformance` in a ``Test*`` class and gives four fixtures::

    class TestAcmeConformance(DeviceBackendConformance):
        @pytest.fixture
        def plugin_module(self):
            return hami_acme.plugin

        @pytest.fixture
        def device_config(self):
            return {"acme": {}}

        @pytest.fixture
        def device_node(self):
            return node("n1", annotations={"hami.io/node-acme-register": ...})  # >= 2 healthy devices

        @pytest.fixture
        def fitting_pod(self):
            return pod(container(limits={"acme.com/npu": 1, "acme.com/npu-mem": 1024}))

Optionally ``malformed_node`` returns ``(node, key)``: a node whose registration under ``key`` is broken.
By default the suite corrupts the backend's ``register_annotation``; capacity-based vendors (no register
annotation) declare their own or the check is skipped.

Where a fixture would only return data, a class attribute says it in one line: ``plugin`` (the module),
``config``, ``node_json``, ``pod_json`` and ``malformed`` stand for ``plugin_module``, ``device_config``,
``device_node``, ``fitting_pod`` and ``malformed_node`` (each test gets its own copy)::

    class TestAcmeConformance(DeviceBackendConformance):
        plugin = hami_acme.plugin
        config = {"acme": {}}
        node_json = node("n1", annotations={"hami.io/node-acme-register": ...})
        pod_json = pod(container(limits={"acme.com/npu": 1, "acme.com/npu-mem": 1024}))

Every check is a ``test_*`` method whose docstring names the bug it prevents; the checks take one fixture,
``conformance_kit``, so a test can also call them directly on a :class:`ConformanceKit`.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import pytest

from hami_core.engine.decision import Decision
from hami_core.engine.facade import Engine
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import DeviceBackend
from hami_core.testing.builders import T0
from hami_core.wire import keys
from hami_core.wire.reasons import Reason, parse_reasons

__all__ = ["NOW", "ConformanceKit", "DeviceBackendConformance"]

#: The engine clock the suite runs at (Unix seconds; 2025-06-15): the builders' ``T0``.
NOW = T0
#: Text the default ``malformed_node`` writes into the registration annotation.
GARBAGE = "{not a registration"

Usage = dict[str, list[tuple[str, int, int, int]]]


class _ShuffleDevices:
    """A wrapper on ``hami_node_devices`` that reorders every answer (``seed=None``: reverses it)."""

    __name__ = "hami.testing.shuffle-devices"

    def __init__(self, seed: int | None) -> None:
        self.seed = seed

    @hookimpl(wrapper=True)
    def hami_node_devices(self, backend: DeviceBackend, node: Mapping[str, Any]) -> Any:
        result = yield
        if not result:
            return result
        devices = list(result)
        if self.seed is None:
            devices.reverse()
        else:
            random.Random(self.seed).shuffle(devices)
        return devices


@dataclass
class ConformanceKit:
    """The vendor's fixtures plus the helpers the checks share."""

    plugin_module: ModuleType | object
    device_config: Mapping[str, Any]
    device_node: Mapping[str, Any]
    fitting_pod: Mapping[str, Any]
    malformed_node: tuple[Mapping[str, Any], str] | None = None
    now: float = NOW

    # ------------------------------------------------------------------------------ engines
    def engine(self, *extra: object) -> Engine:
        """A fresh engine: built-in plugins, the vendor's plugin and ``extra`` (no entry points)."""
        pm = get_plugin_manager(load_entrypoints=False, plugins=[self.plugin_module, *extra])
        return Engine(copy.deepcopy(dict(self.device_config)), plugins=pm, clock=lambda: self.now)

    def plugin_name(self) -> str:
        return getattr(self.plugin_module, "__name__", None) or repr(self.plugin_module)

    def backends(self, engine: Engine) -> list[DeviceBackend]:
        """The backends the vendor's plugin declares under ``device_config``."""
        mine = [b for b in engine.backends.values() if b.plugin == self.plugin_name()]
        assert mine, (f"plugin {self.plugin_name()} declares no backend for device_config={self.device_config!r}; "
                      "the conformance fixtures must enable the vendor's section")
        return mine

    @property
    def node_name(self) -> str:
        return str(self.device_node["metadata"]["name"])

    def loaded(self, *extra: object) -> Engine:
        """A fresh engine that knows ``device_node``."""
        engine = self.engine(*extra)
        status = engine.upsert_node(copy.deepcopy(dict(self.device_node)))
        assert not status.errors, f"device_node does not parse: {dict(status.errors)}"
        return engine

    # ------------------------------------------------------------------------------ objects
    def pod(self, suffix: str, *, node_policy: str | None = None) -> dict[str, Any]:
        """A copy of ``fitting_pod`` with its own name and UID."""
        pod = copy.deepcopy(dict(self.fitting_pod))
        meta = pod.setdefault("metadata", {})
        base = meta.get("name") or "pod"
        meta["name"] = f"{base}-{suffix}"
        meta["uid"] = f"uid-conformance-{base}-{suffix}"
        if node_policy is not None:
            meta.setdefault("annotations", {})[keys.NODE_SCHEDULER_POLICY] = node_policy
        return pod

    def renamed_node(self, name: str) -> dict[str, Any]:
        node = copy.deepcopy(dict(self.device_node))
        node["metadata"]["name"] = name
        return node

    def devices(self, engine: Engine, node: str | None = None) -> dict[str, list[Any]]:
        """The vendor's device usages on ``node`` (default ``device_node``), per backend."""
        state = engine.nodes[node or self.node_name]
        return {b.name: list(state.devices.get(b.name, ())) for b in self.backends(engine)}

    def usage(self, engine: Engine, node: str | None = None) -> Usage:
        """``(id, used, usedmem, usedcores)`` per device, per backend, sorted by id."""
        return {name: sorted((d.id, d.used, d.usedmem, d.usedcores) for d in devs)
                for name, devs in self.devices(engine, node).items()}

    def fill(self, engine: Engine, node: str | None = None) -> tuple[int, Decision | None]:
        """Schedule and reserve copies of ``fitting_pod`` on one node until one fails.

        Returns how many were placed and the failing decision (``None`` when the pods never stopped
        fitting within the node's split count, which is itself an over-allocation).
        """
        target = node or self.node_name
        slots = sum(d.count for devs in self.devices(engine, target).values() for d in devs)
        for i in range(slots + 1):
            pod = self.pod(f"fill-{i}")
            decision = engine.schedule(pod, [target])
            if not decision.ok:
                return i, decision
            engine.reserve(pod, decision)
        return slots + 1, None


def _no_resources(pod: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    spec = out.get("spec") or {}
    for key in ("initContainers", "containers"):
        for ctr in spec.get(key) or ():
            ctr.pop("resources", None)
    return out


def _bare_nodes(name: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {}, "labels": {}},
         "status": {"allocatable": {}, "capacity": {}}},
    ]


class DeviceBackendConformance:
    """Base class of a vendor's conformance tests; see the module docstring for the fixtures to give."""

    #: The engine clock the checks run at.
    now: float = NOW
    #: The data behind the vendor fixtures, for a subclass that gives it as class attributes (module docstring).
    plugin: ClassVar[ModuleType | object | None] = None
    config: ClassVar[Mapping[str, Any] | None] = None
    node_json: ClassVar[Mapping[str, Any] | None] = None
    pod_json: ClassVar[Mapping[str, Any] | None] = None
    malformed: ClassVar[tuple[Mapping[str, Any], str] | None] = None

    # ------------------------------------------------------------------------------ vendor fixtures
    @pytest.fixture
    def plugin_module(self) -> object:
        """The vendor's plugin module (``hami_<vendor>.plugin``): :attr:`plugin`, or override."""
        if self.plugin is None:
            raise NotImplementedError("override the plugin_module fixture: return your plugin module")
        return self.plugin

    @pytest.fixture
    def device_config(self) -> Mapping[str, Any]:
        """The device-config mapping that enables the vendor's backend(s): :attr:`config`, or override."""
        if self.config is None:
            raise NotImplementedError("override the device_config fixture: return e.g. {'acme': {}}")
        return copy.deepcopy(dict(self.config))

    @pytest.fixture
    def device_node(self) -> Mapping[str, Any]:
        """A Node JSON with at least two healthy devices of the vendor: :attr:`node_json`, or override."""
        if self.node_json is None:
            raise NotImplementedError("override the device_node fixture: a Node with >= 2 healthy devices")
        return copy.deepcopy(dict(self.node_json))

    @pytest.fixture
    def fitting_pod(self) -> Mapping[str, Any]:
        """A Pod JSON whose request fits ``device_node``: :attr:`pod_json`, or override."""
        if self.pod_json is None:
            raise NotImplementedError("override the fitting_pod fixture: a Pod that fits device_node")
        return copy.deepcopy(dict(self.pod_json))

    @pytest.fixture
    def malformed_node(self, device_node: Mapping[str, Any], plugin_module: object,
                       device_config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
        """``(node, key)``: ``device_node`` with the registration under ``key`` broken.

        :attr:`malformed` when set; else the default corrupts the first ``register_annotation`` of the vendor's
        backends found on the node; ``None`` (capacity-based vendors) skips the malformed-registration check
        unless overridden.
        """
        if self.malformed is not None:
            bad, key = self.malformed
            return copy.deepcopy(dict(bad)), key
        kit = ConformanceKit(plugin_module, device_config, device_node, {})
        annos = (device_node.get("metadata") or {}).get("annotations") or {}
        for backend in kit.backends(kit.engine()):
            key = backend.register_annotation
            if key and key in annos:
                node = copy.deepcopy(dict(device_node))
                node["metadata"]["annotations"][key] = GARBAGE
                return node, key
        return None

    @pytest.fixture
    def conformance_kit(self, plugin_module: object, device_config: Mapping[str, Any],
                        device_node: Mapping[str, Any], fitting_pod: Mapping[str, Any],
                        malformed_node: tuple[Mapping[str, Any], str] | None) -> ConformanceKit:
        return ConformanceKit(plugin_module, device_config, device_node, fitting_pod, malformed_node, self.now)

    # ------------------------------------------------------------------------------ checks
    def test_fixtures_are_usable(self, conformance_kit: ConformanceKit) -> None:
        """The vendor's fixtures: ``device_node`` registers >= 2 healthy devices and ``fitting_pod`` fits.

        Prevents: a suite that passes vacuously because the node has no devices or the pod never fits.
        """
        kit = conformance_kit
        engine = kit.loaded()
        healthy = [d for devs in kit.devices(engine).values() for d in devs if d.health]
        assert len(healthy) >= 2, f"device_node must register >= 2 healthy devices, got {healthy}"
        decision = engine.schedule(kit.pod("probe"))
        assert decision.ok, f"fitting_pod does not fit device_node: {dict(decision.failed)} {decision.error}"
        assert not decision.skipped

    def test_reasons_parse_into_hami_words(self, conformance_kit: ConformanceKit) -> None:
        """Every failure reason is ``"<n>/<total> <Reason>"`` with a HAMi reason word.

        Prevents: free-text or mis-formatted reasons that HAMi's event code (``parse_reasons``) drops, so a
        user's ``kubectl describe pod`` shows no explanation of why the pod is pending.
        """
        kit = conformance_kit
        engine = kit.loaded()
        placed, failed = kit.fill(engine)
        assert failed is not None, f"{placed} copies of fitting_pod fit, more than the node's split count"
        reason = failed.failed.get(kit.node_name, "")
        items = [item.strip() for item in reason.split(",") if item.strip()]
        words = parse_reasons(reason)
        assert items, f"no reason given for {kit.node_name}: {dict(failed.failed)}"
        assert len(words) == len(items), f"reason items that do not parse as '<n>/<total> <Reason>': {reason!r}"
        unknown = [w for w in words if w not in Reason.ALL]
        assert not unknown, f"reason words that are not HAMi reasons: {unknown} in {reason!r}"

    def test_fit_never_exceeds_capacity(self, conformance_kit: ConformanceKit) -> None:
        """Repeated schedule+reserve never books more than a device's memory, cores or split count.

        Prevents: over-allocation (two tasks promised the same memory, OOM on the card; more tasks than
        the device plugin advertised).
        """
        kit = conformance_kit
        engine = kit.loaded()
        placed, failed = kit.fill(engine)
        assert placed >= 1, f"fitting_pod did not fit once: {failed}"
        assert failed is not None, f"{placed} copies of fitting_pod fit, more than the node's split count"
        for backend, devs in kit.devices(engine).items():
            for d in devs:
                assert d.used <= d.count, f"{backend} {d.id}: {d.used} tasks on {d.count} slots"
                assert d.usedmem <= d.totalmem, f"{backend} {d.id}: {d.usedmem} MiB booked of {d.totalmem}"
                assert d.usedcores <= d.totalcore, f"{backend} {d.id}: {d.usedcores} cores booked of {d.totalcore}"

    def test_feasibility_does_not_depend_on_device_order(self, conformance_kit: ConformanceKit) -> None:
        """The same pods fit whatever order the node lists its devices in (reversed, shuffled).

        Prevents: fits that only look at the first or last device, or that index devices by position
        instead of by ID, so a pod fits or not depending on registration order.
        """
        kit = conformance_kit
        baseline, _ = kit.fill(kit.loaded())
        for seed in (None, 1, 2, 3):
            engine = kit.loaded(_ShuffleDevices(seed))
            first = engine.schedule(kit.pod("order"))
            assert first.ok, f"fitting_pod no longer fits with devices ordered by seed {seed}: {dict(first.failed)}"
            placed, _ = kit.fill(engine)
            assert placed == baseline, (f"{placed} pods fit with devices ordered by seed {seed} "
                                        f"(reversed when None), {baseline} in registration order")

    def test_empty_container_requests_nothing(self, conformance_kit: ConformanceKit) -> None:
        """A container without resources requests no device of the vendor.

        Prevents: default requests invented for plain containers, which would send every pod of the
        cluster through the device scheduler and book devices for sidecars.
        """
        kit = conformance_kit
        engine = kit.loaded()
        bare = _no_resources(kit.pod("bare"))
        assert engine.requests(bare).empty, f"requests for a pod without resources: {engine.requests(bare)}"
        assert engine.schedule(bare).skipped
        for backend in kit.backends(engine):
            for ctr in ({"name": "c"}, {"name": "c", "resources": {}},
                        {"name": "c", "resources": {"limits": {}, "requests": {}}}):
                got = engine.hook.hami_container_request(backend=backend, pod=bare, container=ctr)
                assert got is None, f"{backend.name}: {ctr} requests {got}"

    def test_node_without_registration_has_no_devices(self, conformance_kit: ConformanceKit) -> None:
        """A node with none of the vendor's annotations or capacity yields no devices and no error.

        Prevents: a crash or an error report on every plain node of the cluster (CPU nodes, other vendors).
        """
        kit = conformance_kit
        engine = kit.engine()
        for bare in _bare_nodes("conformance-bare"):
            for backend in kit.backends(engine):
                devices = engine.hook.hami_node_devices(backend=backend, node=bare)
                assert not devices, f"{backend.name}: devices on a node without registration: {devices}"
            status = engine.upsert_node(bare)
            assert not status.devices and not status.errors, status

    def test_malformed_registration_is_a_clear_error(self, conformance_kit: ConformanceKit) -> None:
        """A malformed registration raises ``WireFormatError`` naming the key; the node keeps its devices unless
        the backend's health check then calls the node unhealthy (HAMi: a failed ``GetNodeDevices`` keeps the cache
        while ``CheckHealth`` passes; a capacity-counted backend reads a malformed capacity as 0, unhealthy).

        Prevents: a node silently losing (or half-parsing) its devices, or the whole inventory loop
        crashing, because one device plugin wrote a bad annotation.
        """
        kit = conformance_kit
        if kit.malformed_node is None:
            pytest.skip("no register annotation to corrupt: declare a malformed_node fixture")
        bad, key = kit.malformed_node
        engine = kit.loaded()
        before = {name: [d.id for d in devs] for name, devs in kit.devices(engine).items()}
        raised = []
        for backend in kit.backends(engine):
            try:
                engine.hook.hami_node_devices(backend=backend, node=copy.deepcopy(dict(bad)))
            except WireFormatError as exc:
                raised.append(str(exc))
        assert raised, f"no backend raised WireFormatError for a malformed {key}"
        assert all(key in message for message in raised), f"errors do not name {key!r}: {raised}"
        status = engine.upsert_node(copy.deepcopy(dict(bad)))
        assert status.errors, "upsert_node reported no error for a malformed registration"
        after = {name: [d.id for d in devs] for name, devs in kit.devices(engine).items()}
        kept = {name: ids for name, ids in before.items() if name not in status.unhealthy}
        assert {name: ids for name, ids in after.items() if name not in status.unhealthy} == kept, \
            "the node's previous devices were not kept"
        assert not {name for name, ids in after.items() if ids} & set(status.unhealthy), \
            "an unhealthy backend kept its devices"

    def test_allocation_round_trips_through_decoder(self, conformance_kit: ConformanceKit) -> None:
        """Decision annotations, read back by ``upsert_pod`` on a fresh engine, book what ``reserve`` booked.

        Prevents: usage lost or changed after a scheduler restart (the allocation encoder and the
        vendor's decoder disagree), so devices are double-booked.
        """
        kit = conformance_kit
        first = kit.loaded()
        pod = kit.pod("roundtrip")
        decision = first.schedule(pod)
        assert decision.ok, dict(decision.failed)
        first.reserve(pod, decision)
        assert decision.annotations.get(keys.VGPU_NODE) == decision.node
        bound = copy.deepcopy(pod)
        bound["metadata"].setdefault("annotations", {}).update(decision.annotations)
        bound["spec"]["nodeName"] = decision.node
        bound["status"] = {"phase": "Running"}
        second = kit.loaded()
        second.upsert_pod(bound)
        assert not second.nodes[kit.node_name].quarantine, dict(second.nodes[kit.node_name].quarantine)
        booked = kit.usage(first)
        assert any(used for devs in booked.values() for _, used, _, _ in devs), "reserve booked nothing"
        assert kit.usage(second) == booked

    def test_scores_respect_policy_direction(self, conformance_kit: ConformanceKit) -> None:
        """Of two nodes differing only in usage, binpack picks the fuller, spread the emptier.

        Prevents: a vendor score with the wrong sign, which inverts the operator's node policy
        (HAMi issue #2973: spread packing pods onto one node).
        """
        kit = conformance_kit
        for policy, expected in (("binpack", "conformance-busy"), ("spread", "conformance-idle")):
            engine = kit.engine()
            for name in ("conformance-busy", "conformance-idle"):
                engine.upsert_node(kit.renamed_node(name))
            occupant = kit.pod("occupant")
            placed = engine.schedule(occupant, ["conformance-busy"])
            assert placed.ok, dict(placed.failed)
            engine.reserve(occupant, placed)
            decision = engine.schedule(kit.pod(f"probe-{policy}", node_policy=policy))
            if "conformance-busy" not in decision.nodes:
                pytest.skip("fitting_pod fits device_node only once; give a smaller pod to check scores")
            assert decision.node == expected, f"{policy} chose {decision.node}; scores {dict(decision.scores)}"

    def test_admission_is_idempotent(self, conformance_kit: ConformanceKit) -> None:
        """``admit(admit(pod)) == admit(pod)``, for the fitting pod and for a pod without resources.

        Prevents: a webhook re-invocation (``reinvocationPolicy: IfNeeded``) adding env vars or limits twice.
        """
        kit = conformance_kit
        engine = kit.engine()
        for pod in (kit.pod("admit"), _no_resources(kit.pod("admit-bare"))):
            once = engine.admit(pod)
            assert engine.admit(once) == once


    # ------------------------------------------------------------------------------ DRA (issue 30)
    def test_dra_devices_describe_the_registration(self, conformance_kit: ConformanceKit) -> None:
        """``hami_dra_devices`` describes every registered device once, by its id, as publishable ResourceSlice
        devices (names unique DNS labels, attributes and capacities within the API server's limits, no capacity
        beyond the registration's memory), and marks a device the registration calls unhealthy.

        Prevents: ``hami dra-driver`` publishing a pool the API server refuses (the node then offers nothing in DRA
        mode), devices under the wrong driver, more memory than the card has, or unhealthy cards kube-scheduler
        would allocate.
        """
        import dataclasses

        from hami_core.dra.driver import describe
        from hami_core.dra.model import CAP_MEMORY, MIB
        from hami_core.dra.slices import build_slices

        kit = conformance_kit
        engine = kit.engine()
        for backend in kit.backends(engine):
            infos = list(engine.hook.hami_node_devices(backend=backend, node=copy.deepcopy(dict(kit.device_node)))
                         or ())
            if not infos:
                continue
            described = describe(engine.hook, backend, infos)
            assert sorted(d.uuid for d in described) == sorted(i.id for i in infos), \
                f"{backend.name}: hami_dra_devices must describe each registered device once, by id"
            by_id = {i.id: i for i in infos}
            for dev in described:
                memory = dev.capacity.get(CAP_MEMORY)
                assert memory is None or memory.value <= by_id[dev.uuid].devmem * MIB, \
                    f"{backend.name} {dev.uuid}: {memory} is more memory than registered"
                assert all(cap.value >= 0 and cap.default <= cap.value for cap in dev.capacity.values()), dev
            slices = build_slices(kit.node_name, backend.name, described, vendor=backend.vendor)
            published = [d["name"] for s in slices for d in s["spec"].get("devices") or ()]
            assert len(published) == len(set(published)) == sum(1 for d in described if d.healthy)
            sick = [dataclasses.replace(infos[0], health=False), *infos[1:]]
            marked = {d.uuid: d.healthy for d in describe(engine.hook, backend, sick)}
            assert marked[infos[0].id] is False, f"{backend.name}: an unhealthy device must be marked unhealthy"
