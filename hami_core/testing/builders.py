"""Builders for a device plugin's own unit tests: a settable clock, engines, fit inputs and placed pods.

Every vendor's tests need the same handful of objects: an :class:`~hami_core.engine.facade.Engine` at a
fixed time, a :class:`~hami_core.plugins.types.DeviceUsage` per device, a
:class:`~hami_core.plugins.types.DeviceRequest`, a :class:`~hami_core.plugins.types.GpuPolicy`, one node
offered to the backend's filter function, and pods the scheduler placed earlier. This module builds them
with HAMi's units (memory in MiB, cores in percent of a card unless the vendor says otherwise) and no
vendor defaults, so a plugin's test library only adds its own: card sizes, resource names, annotation keys.

A fit test, with the filter function of the example plugin ``hami_acme``::

    from hami_core.testing import chosen, fit_one, request, usage

    devices = [usage("A0", vendor="ACME"), usage("A1", vendor="ACME", used=1, usedmem=64)]
    result = fit_one(acme.filter_nodes, None, devices, request("ACME", 1, 32))
    assert chosen(result) == ["A1"]          # the preferred device is the last one

A vendor's test library starts from a :class:`VendorKit`, which builds what every one of its tests needs::

    acme = VendorKit(hami_acme.plugin, "acme", AcmeConfig)
    plugin_manager, make_engine, parse_config = acme.plugin_manager, acme.engine, acme.parse_config
    container, make_pod = acme.container, acme.pod

Times: :data:`T0` is the clock the kit's engines start at (also the conformance suite's ``NOW``).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from hami_core.engine.facade import Engine
from hami_core.plugins.helpers import parse_section
from hami_core.plugins.manager import HamiPluginManager, get_plugin_manager
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    QuotaView,
)
from hami_core.testing import factories
from hami_core.wire import keys

__all__ = [
    "T0",
    "Clock",
    "FakeNode",
    "VendorKit",
    "candidate",
    "chosen",
    "container_limits",
    "container_request",
    "engine_with",
    "fit_one",
    "gpu_policy",
    "local_time",
    "plugin_manager",
    "request",
    "requesting",
    "running_pod",
    "usage",
]

#: The time (Unix seconds, 2025-06-15 UTC) a :class:`Clock` starts at.
T0 = 1_750_000_000.0

#: The arguments of the ``hami_filter_nodes`` hook that :func:`fit_one` hands over by name.
_FILTER_ARGS = ("backend", "pod", "request", "candidates", "policy", "quota")

ModelT = TypeVar("ModelT", bound=BaseModel)


class Clock:
    """A settable engine clock: ``Engine(..., clock=clock)``, then ``clock.now += 61`` to let time pass.

    Time decides handshake staleness (a ``Requesting_`` mark older than 60 s), reservation expiry and
    every ``now`` a hook receives, so a test that needs "later" advances the clock instead of sleeping.
    """

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def __repr__(self) -> str:
        return f"Clock({self.now!r})"


def local_time(t: float) -> str:
    """``t`` (Unix seconds) as HAMi writes handshake times: local wall clock, ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def requesting(t: float) -> str:
    """The scheduler's handshake mark written at ``t``: ``Requesting_<local time>``.

    Put it on a node's handshake annotation to test health checks: with ``clock.now`` more than 60 s past
    ``t`` and nothing allocatable, the node is stale.
    """
    return "Requesting_" + local_time(t)


# --------------------------------------------------------------------------------------------- engines
def plugin_manager(*plugins: object) -> HamiPluginManager:
    """A plugin manager with the built-in plugins and ``plugins`` only (installed entry points are not loaded,
    so another vendor installed in the same environment cannot change the test's outcome)."""
    return get_plugin_manager(load_entrypoints=False, plugins=plugins)


def engine_with(*plugins: object, config: Mapping[str, Any] | None = None,
                scheduler: Mapping[str, Any] | None = None, clock: Callable[[], float] | None = None) -> Engine:
    """An :class:`Engine` with the built-in plugins and ``plugins``, at a :class:`Clock` (``T0``) by default.

    ``config`` is the device config (``{"acme": {}}`` enables the ACME backend); ``scheduler`` becomes its
    ``scheduler:`` section. Neither mapping is modified.
    """
    devices: dict[str, Any] = dict(config or {})
    if scheduler is not None:
        devices["scheduler"] = dict(scheduler)
    return Engine(devices, plugins=plugin_manager(*plugins), clock=clock if clock is not None else Clock())


@dataclass(frozen=True)
class VendorKit(Generic[ModelT]):
    """The builders every test of one vendor plugin uses: its plugin manager, an engine with its config section,
    the section as the plugin validates it, and containers and pods as its tests write them.

    ``plugin`` is the plugin module (``hami_acme.plugin``), ``section`` its device-config key (``acme``) and
    ``model`` the pydantic model of that section. ``empty`` is what :meth:`engine` puts under the key when it
    is given no section: ``{}`` (enabled with the defaults), or ``None`` for tests that mean the YAML key with
    an empty body.
    """

    plugin: object
    section: str
    model: type[ModelT] | None = None
    empty: Any = field(default_factory=dict)

    def plugin_manager(self, *others: object) -> HamiPluginManager:
        """:func:`plugin_manager` with the vendor's plugin (and ``others``)."""
        return plugin_manager(self.plugin, *others)

    def engine(self, section: Any = None, *, scheduler: Mapping[str, Any] | None = None,
               clock: Callable[[], float] | None = None) -> Engine:
        """:func:`engine_with` the vendor's plugin and ``{section: <section>}`` (a mapping is copied; anything else,
        a list say, is passed as it is for the plugin to judge); ``None`` means :attr:`empty`."""
        if isinstance(section, Mapping):
            section = dict(section)
        value = copy.deepcopy(self.empty) if section is None else section
        return engine_with(self.plugin, config={self.section: value}, scheduler=scheduler, clock=clock)

    def parse_config(self, value: Any) -> ModelT:
        """The section validated as the plugin validates it (:func:`~hami_core.plugins.parse_section`)."""
        if self.model is None:
            raise TypeError(f"VendorKit({self.section!r}) was given no config model")
        return parse_section(self.section, self.model, value)

    @staticmethod
    def container(name: str = "c", **kwargs: Any) -> dict[str, Any]:
        """:func:`~hami_core.testing.factories.container` with the quantities kept as given (YAML integers, or
        malformed values for error tests)."""
        return factories.container(name, as_strings=False, **kwargs)

    @staticmethod
    def pod(*containers: Mapping[str, Any], name: str = "p", uid: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """:func:`~hami_core.testing.factories.pod` named ``p`` with UID ``uid-<name>`` unless given, so that the
        same pod built twice (before and after placement) is one pod to the engine."""
        return factories.pod(*containers, name=name, uid=uid or f"uid-{name}", **kwargs)


def container_request(engine: Engine, container: Mapping[str, Any], backend_name: str) -> DeviceRequest | None:
    """What ``engine`` asks of ``backend_name`` for a one-container pod holding ``container``; ``None`` when the
    container asks nothing of it (HAMi would produce ``Nums == 0``)."""
    reqs = engine.requests(factories.pod(container))
    assert len(reqs.containers) == 1, reqs
    return reqs.containers[0].get(backend_name)


def container_limits(pod: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """The resource limits of a pod's app container ``index`` (``{}`` when it has none), e.g. after admission."""
    return pod["spec"]["containers"][index].get("resources", {}).get("limits", {})


# --------------------------------------------------------------------------------------------- fit inputs
@dataclass
class FakeNode:
    """A stand-in for the engine's node state: the fields of :class:`~hami_core.plugins.types.NodeView`
    that a filter function may read. Give it ``annotations`` when the fit reads node annotations."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, vendor: str, type: str | None = None, index: int = 0, count: int = 100,
          totalmem: int = 128, totalcore: int = 100, used: int = 0, usedmem: int = 0, usedcores: int = 0,
          numa: int = 0, mode: str = "", health: bool = True, custom_info: Mapping[str, Any] | None = None,
          pair_scores: Mapping[str, int] | None = None) -> DeviceUsage:
    """One device and what is booked on it, as the engine hands devices to ``hami_filter_nodes``.

    ``vendor`` is the backend name (the common word, ``DeviceInfo.vendor``); ``type`` the registered device
    type, ``vendor`` unless given. The defaults are the card of HAMi's Go fit tests: split count 100, 128 MiB,
    100 cores, healthy and idle. ``used``/``usedmem``/``usedcores`` are the tasks, MiB and cores booked.
    """
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore,
                      type=vendor if type is None else type, numa=numa, mode=mode, health=health,
                      custom_info=custom_info, vendor=vendor, pair_scores=pair_scores)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(backend_name: str, nums: int = 1, memreq: int = 0, coresreq: int = 0,
            pct: int = MEM_PERCENTAGE_UNSET) -> DeviceRequest:
    """One container's request of ``backend_name``: ``nums`` devices, ``memreq`` MiB and ``coresreq`` cores
    each, ``pct`` percent of each device's memory (:data:`MEM_PERCENTAGE_UNSET` when not asked).

    The argument order is the order people say it in ("1 card, 4 GiB, 25 cores"); note that
    :class:`DeviceRequest` itself takes the percentage before the cores.
    """
    return DeviceRequest(backend_name, nums, memreq, pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack", numa_bind: bool = False,
               weights: tuple[int, int, int] = (1, 1, 1)) -> GpuPolicy:
    """The effective policy of a pod: ``gpu`` is the raw GPU policy (``"binpack,numa"``), split into tokens
    as the engine splits ``hami.io/gpu-scheduler-policy``; ``node`` the node policy."""
    tokens = tuple(t.strip() for t in gpu.split(",") if t.strip())
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tokens, weights=weights, numa_bind=numa_bind)


def candidate(devices: Sequence[DeviceUsage], *, node_annotations: Mapping[str, str] | None = None,
              allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None,
              node: FakeNode | None = None) -> FitCandidate:
    """One node offered to a filter function: ``devices`` in the order given (the preferred device **last**,
    as the engine sorts them), on ``node`` (a :class:`FakeNode` with ``node_annotations`` by default).

    ``allocated`` is what earlier containers of the same pod already got on the node, per backend name.
    """
    where = node if node is not None else FakeNode(annotations=dict(node_annotations or {}))
    return FitCandidate(where, list(devices), dict(allocated or {}))


def fit_one(filter_nodes: Callable[..., Sequence[FitResult] | None], backend: DeviceBackend | None,
            devices: Sequence[DeviceUsage], request: DeviceRequest, *, pod: Mapping[str, Any] | None = None,
            pod_annotations: Mapping[str, str] | None = None, node_annotations: Mapping[str, str] | None = None,
            allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None,
            policy: GpuPolicy | None = None, quota: QuotaView | None = None) -> FitResult:
    """Run ``filter_nodes`` on one node holding ``devices`` and return its one :class:`FitResult`.

    ``filter_nodes`` is the plugin's ``hami_filter_nodes`` implementation or the backend function behind it.
    Like pluggy, :func:`fit_one` passes only the hook arguments it names (``backend``, ``pod``, ``request``,
    ``candidates``, ``policy``, ``quota``), so ``filter(request, candidates, policy)`` works as well as the
    full signature; bind any other argument first (``functools.partial(filter_nodes, config)``).

    The pod is ``pod`` or a one-container pod with ``pod_annotations``; the policy defaults to
    :func:`gpu_policy` (spread). Fits walk ``devices`` from the last to the first, like HAMi.
    """
    the_pod = dict(pod) if pod is not None else factories.pod(annotations=pod_annotations)
    offered = candidate(devices, node_annotations=node_annotations, allocated=allocated)
    given = {"backend": backend, "pod": the_pod, "request": request, "candidates": [offered],
             "policy": policy if policy is not None else gpu_policy(), "quota": quota}
    params = inspect.signature(filter_nodes).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        named = list(_FILTER_ARGS)
    else:
        named = [name for name in _FILTER_ARGS if name in params]
    results = filter_nodes(**{name: given[name] for name in named})
    assert results is not None, (f"{_name(filter_nodes)} returned None for backend {backend!r}: "
                                 "it does not own the backend (a hook implementation answers only for its own)")
    results = list(results)
    assert len(results) == 1, f"{_name(filter_nodes)} returned {len(results)} results for 1 candidate: {results}"
    assert isinstance(results[0], FitResult), f"{_name(filter_nodes)} returned {results[0]!r}, not a FitResult"
    return results[0]


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def chosen(result: FitResult) -> list[str]:
    """The UUIDs of the devices a fit chose, in order; fails with the fit's reason when it did not fit."""
    assert result.ok, f"the fit failed: {result.reason}"
    return [d.uuid for d in result.devices]


# --------------------------------------------------------------------------------------------- pods
def running_pod(name: str, node: str, allocated: Mapping[str, str], *,
                containers: int | Sequence[Mapping[str, Any]] = 1, init: int | Sequence[Mapping[str, Any]] = 0,
                namespace: str = "default", uid: str | None = None,
                annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier, as the engine finds it when it lists pods: bound to ``node``
    (``spec.nodeName`` and ``hami.io/vgpu-node``), ``Running``, with ``allocated`` (annotation key to the
    encoded devices, e.g. ``{"hami.io/acme-devices-allocated": "A0,ACME,512,25:;"}``) on it.

    ``containers``/``init`` are counts of bare containers named ``c0``.../``i0``... or the containers
    themselves; ``annotations`` are added last (they may override the others).
    """
    apps = [factories.container(f"c{i}") for i in range(containers)] if isinstance(containers, int) else containers
    inits = [factories.container(f"i{i}") for i in range(init)] if isinstance(init, int) else init
    annos = {keys.VGPU_NODE: node, **allocated, **(annotations or {})}
    return factories.pod(*apps, init=inits, name=name, namespace=namespace, uid=uid, annotations=annos,
                         node_name=node, phase="Running")
