"""Builders for the hami-cambricon tests: the Cambricon defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: device memory in MiB, container memory in 256 MiB units, cores in percent of one MLU.
The vendor-neutral pieces (``Clock``, ``FakeNode``, ``chosen``, ``gpu_policy``...) come from the kit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_cambricon.plugin
from hami_cambricon import backend as mlu
from hami_cambricon.config import CambriconConfig, parse_config
from hami_core import testing as kit
from hami_core.plugins import (
    ContainerDevice,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    GpuPolicy,
    QuotaEntry,
    QuotaView,
    ResourceNames,
    containers,
    metadata,
)
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import FakeNode as FakeNode
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.wire import keys

VMLU = "cambricon.com/vmlu"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"
VCORE = "cambricon.com/mlu.smlu.vcore"
#: The count name HAMi's own Cambricon tests configure.
MLU = "cambricon.com/mlu"
TO_ALLOCATE = "hami.io/cambricon-mlu-devices-to-allocate"
ALLOCATED = "hami.io/cambricon-mlu-devices-allocated"
PROFILE = "CAMBRICON_DSMLU_PROFILE"
ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
LOCK = "cambricon.com/dsmlu.lock"
VGPU_NODE = keys.VGPU_NODE
VGPU_TIME = keys.VGPU_TIME
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY

#: Two models, as the README's multi-model example configures them.
MODELS = {"models": [
    {"name": "MLU370", "resourceCountName": "cambricon.com/mlu370.vmlu"},
    {"name": "MLU590", "resourceCountName": "cambricon.com/mlu590.vmlu"},
]}


# --------------------------------------------------------------------------------------------- engine
CAMBRICON = kit.VendorKit(hami_cambricon.plugin, "cambricon", CambriconConfig, empty=None)
#: The plugin manager with hami-cambricon; an engine on a ``cambricon:`` section (``None``: the YAML key with an
#: empty body, the chart defaults) at a fake time.
plugin_manager, make_engine = CAMBRICON.plugin_manager, CAMBRICON.engine


def config(**section: Any) -> CambriconConfig:
    return parse_config(section)


def backend(name: str = "MLU", **section: Any) -> mlu.MluBackend:
    """The backend ``name`` for a ``cambricon:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return backend_of(parse_config(section), name)


def backend_of(cfg: CambriconConfig, name: str = "MLU") -> mlu.MluBackend:
    """The backend ``name`` of a validated section."""
    found = [b for b in mlu.make_backends(cfg) if b.name == name]
    assert len(found) == 1
    return found[0]


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>`` unless given.
container, make_pod = CAMBRICON.container, CAMBRICON.pod


def mlu_container(name: str = "c", count: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, *, count_name: str = VMLU, mem_name: str = VMEMORY,
                  core_name: str = VCORE) -> dict[str, Any]:
    """A container with MLU limits (values as strings, as in Kubernetes JSON); ``mem`` in 256 MiB units."""
    return kit.device_container(ResourceNames(count_name, mem_name, cores=core_name), count, mem, cores, name=name)


def running_pod(name: str, node: str, allocated: str, *, key: str = ALLOCATED, containers: int = 1,
                init: int = 0) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    return kit.running_pod(name, node, {key: allocated}, uid=f"uid-{name}", containers=containers, init=init)


# --------------------------------------------------------------------------------------------- nodes
def make_node(name: str, cores: int | str | None = None, vmemory: int | str | None = None, *,
              core_name: str = VCORE, mem_name: str = VMEMORY, labels: Mapping[str, str] | None = None,
              annotations: Mapping[str, str] | None = None,
              extra_capacity: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node as Cambricon's dynamic-smlu device plugin leaves it: MLU cores and memory in ``capacity``."""
    given = {core_name: cores, mem_name: vmemory}
    capacity = {"cpu": "64", "memory": "256Gi", **{k: v for k, v in given.items() if v is not None},
                **(extra_capacity or {})}
    return kit.node(name, annotations=annotations, labels=labels, capacity=capacity, allocatable=capacity)


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: the card of HAMi's Cambricon fit tests, 128 MiB / 100 cores).
usage = partial(kit.usage, vendor="MLU")


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = 0, type: str = "MLU") -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def quota_view(pod: Mapping[str, Any], quotas: Mapping[tuple[str, str], QuotaEntry] | None,
               allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None,
               b: mlu.MluBackend) -> QuotaView | None:
    """The engine's quota view for fitting ``pod``'s next ``b`` container on a node where its earlier containers
    got ``allocated``: the ``(namespace, resource)`` entries of the pod's namespace, ``None`` when none limits it.

    The container fitted is the first one (init containers first) requesting ``b`` that has no devices yet.
    """
    namespace = metadata(pod).get("namespace") or "default"
    entries = {res: entry for (ns, res), entry in (quotas or {}).items() if ns == namespace}
    view = QuotaView(namespace, entries)
    if not view.limited(b.resource_names):
        return None
    init, app = containers(pod)
    wanted = [i for i, c in enumerate((*init, *app)) if b.hami_container_request(c) is not None]
    earlier = list((allocated or {}).get(b.name, ()))
    placed = sum(1 for c in earlier if c)
    position = wanted[placed] if placed < len(wanted) else len(earlier)
    return QuotaView(namespace, entries, position, len(init))


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod: Mapping[str, Any] | None = None,
        pod_annotations: Mapping[str, str] | None = None, policy: GpuPolicy | None = None,
        allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None,
        quotas: Mapping[tuple[str, str], QuotaEntry] | None = None, cfg: CambriconConfig | None = None,
        name: str = "MLU") -> FitResult:
    """The backend's ``hami_filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    ``quotas`` maps ``(namespace, resource)`` to the namespace's quota entry, as the engine's quota cache holds
    them; the fit gets the view of the pod's namespace (:func:`quota_view`). Fit walks the list from the last
    device to the first, like HAMi.
    """
    b = backend_of(cfg or parse_config({}), name)
    the_pod = pod if pod is not None else kit.pod(annotations=pod_annotations)
    return kit.fit_one(b.hami_filter_nodes, b, devices, req, pod=the_pod, policy=policy, allocated=allocated,
                       quota=quota_view(the_pod, quotas, allocated, b))
