"""Kubernetes Node and Pod JSON builders with HAMi annotations, for tests (plain dicts, no client library)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.plugins.types import ResourceNames
from hami_core.wire import keys

__all__ = ["container", "device_container", "node", "pod"]


def container(name: str = "c", *, limits: Mapping[str, Any] | None = None,
              requests: Mapping[str, Any] | None = None, as_strings: bool = True, **extra: Any) -> dict[str, Any]:
    """A container; ``limits``/``requests`` values are written as strings, as Kubernetes JSON has them.

    ``as_strings=False`` keeps the values as given (YAML integers, or malformed values for error tests).
    """
    ctr: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = {k: str(v) for k, v in limits.items()} if as_strings else dict(limits)
    if requests is not None:
        resources["requests"] = {k: str(v) for k, v in requests.items()} if as_strings else dict(requests)
    if resources:
        ctr["resources"] = resources
    ctr.update(extra)
    return ctr



def device_container(names: ResourceNames, count: int | str = 1, mem: int | str | None = None,
                     cores: int | str | None = None, *, pct: int | str | None = None, name: str = "c",
                     **extra: Any) -> dict[str, Any]:
    """A container whose limits ask a backend with resource ``names`` (``backend.resource_names``) for ``count``
    devices, each with ``mem`` (in the memory resource's units), ``cores`` and ``pct`` percent of its memory.

    Only the quantities given are written; asking for one the backend has no resource for is a ``ValueError``.
    """
    limits: dict[str, Any] = {names.count: count}
    for what, resource, value in (("mem", names.memory, mem), ("cores", names.cores, cores),
                                  ("pct", names.memory_percentage, pct)):
        if value is None:
            continue
        if not resource:
            raise ValueError(f"device_container: {what}={value!r} given but the backend counting {names.count!r} "
                             f"has no {what} resource")
        limits[resource] = value
    return container(name, limits=limits, **extra)

def node(name: str = "node-1", *, annotations: Mapping[str, str] | None = None,
         labels: Mapping[str, str] | None = None, allocatable: Mapping[str, Any] | None = None,
         capacity: Mapping[str, Any] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    """A Node: registration annotations (``hami.io/node-<vendor>-register``...), and capacity for vendors
    that register through extended resources. ``capacity`` defaults to ``allocatable``."""
    meta: dict[str, Any] = {"name": name, "annotations": dict(annotations or {})}
    if labels:
        meta["labels"] = dict(labels)
    status: dict[str, Any] = {}
    if allocatable is not None:
        status["allocatable"] = {k: str(v) for k, v in allocatable.items()}
    if capacity is not None or allocatable is not None:
        status["capacity"] = {k: str(v) for k, v in (capacity if capacity is not None else allocatable or {}).items()}
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": status}
    if unschedulable:
        out["spec"] = {"unschedulable": True}
    return out


def pod(*containers: Mapping[str, Any], name: str = "pod-1", namespace: str = "default", uid: str | None = None,
        annotations: Mapping[str, str] | None = None, init: Sequence[Mapping[str, Any]] = (),
        node_policy: str | None = None, gpu_policy: str | None = None, node_name: str | None = None,
        phase: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod with ``containers`` (default: one container without resources).

    ``node_policy``/``gpu_policy`` set ``hami.io/node-scheduler-policy``/``hami.io/gpu-scheduler-policy``;
    ``node_name`` sets ``spec.nodeName``; ``phase`` sets ``status.phase``; other keywords go to ``spec``.
    """
    annos = dict(annotations or {})
    if node_policy is not None:
        annos[keys.NODE_SCHEDULER_POLICY] = node_policy
    if gpu_policy is not None:
        annos[keys.GPU_SCHEDULER_POLICY] = gpu_policy
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"}
    if annos:
        meta["annotations"] = annos
    body: dict[str, Any] = {"containers": [dict(c) for c in containers] or [container()]}
    if init:
        body["initContainers"] = [dict(c) for c in init]
    if node_name is not None:
        body["nodeName"] = node_name
    body.update(spec)
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}
    if phase is not None:
        out["status"] = {"phase": phase}
    return out
