"""Small accessors over Kubernetes Pod JSON dicts (no Kubernetes library)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.objects import annotations, containers, metadata, pod_key, pod_ref
from hami_core.wire.quantity import parse_quantity

__all__ = ["annotations", "containers", "metadata", "pod_key", "pod_ref"]  # re-exported

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


_META_STRINGS = ("name", "namespace", "uid", "generateName", "resourceVersion")
_SPEC_STRINGS = ("schedulerName", "nodeName", "runtimeClassName")


def _kind(value: Any) -> str:
    """A JSON value's type as the message names it (``null``, ``bool``, ``int``, ``str``, ``list``, ``dict``)."""
    return "null" if value is None else type(value).__name__


def _string_map_error(value: Any, where: str) -> str | None:
    """``value`` (not None) must be an object of strings, as Kubernetes' ``map[string]string``."""
    if not isinstance(value, Mapping):
        return f"{where} must be an object, got {_kind(value)}"
    for key, item in value.items():
        if not isinstance(item, str):
            return f"{where}[{key!r}] must be a string, got {_kind(item)}"
    return None


def _container_error(ctr: Any, where: str) -> str | None:
    if not isinstance(ctr, Mapping):
        return f"{where} must be an object, got {_kind(ctr)}"
    name = ctr.get("name")
    if name is not None and not isinstance(name, str):
        return f"{where}.name must be a string, got {_kind(name)}"
    if "resources" in ctr:
        resources = ctr["resources"]
        if not isinstance(resources, Mapping):
            return f"{where}.resources must be an object, got {_kind(resources)}"
        for kind in ("limits", "requests"):
            if kind not in resources:
                continue
            values = resources[kind]
            if not isinstance(values, Mapping):
                return f"{where}.resources.{kind} must be an object, got {_kind(values)}"
            for res, quantity in values.items():
                # a quantity is a string; the API server also takes a plain number on input
                if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
                    return f"{where}.resources.{kind}[{res!r}] must be a quantity string, got {_kind(quantity)}"
                if isinstance(quantity, float) and not math.isfinite(quantity):
                    return f"{where}.resources.{kind}[{res!r}] must be a finite quantity, got {quantity}"
    env = ctr.get("env")
    if env is not None:
        if not isinstance(env, list):
            return f"{where}.env must be a list, got {_kind(env)}"
        for i, item in enumerate(env):
            if not isinstance(item, Mapping):
                return f"{where}.env[{i}] must be an object, got {_kind(item)}"
            for key in ("name", "value"):
                if item.get(key) is not None and not isinstance(item[key], str):
                    return f"{where}.env[{i}].{key} must be a string, got {_kind(item[key])}"
    context = ctr.get("securityContext")
    if context is not None and not isinstance(context, Mapping):
        return f"{where}.securityContext must be an object, got {_kind(context)}"
    return None


def pod_shape_error(pod: Mapping[str, Any]) -> str | None:
    """Where a pod from a request body is not shaped like a Pod in the fields hami and the device plugins read
    (the API server never stores such a pod; a hand-written or fuzzed body can hold one): ``"spec.containers[0].
    resources must be an object, got int"``, ``"metadata.annotations['hami.io/gpu-scheduler-policy'] must be a
    string, got int"``, or None. Checked before any plugin sees the pod, so a plugin may index these fields.

    Kubernetes' own types decide: annotations and labels are ``map[string]string``, ``metadata``, ``spec``, a
    container's ``resources`` and its ``limits`` and ``requests`` are objects (a JSON null among them is refused
    too: the API server never writes one, and admission writes into them), quantities are strings (or numbers,
    which the API server accepts on input). Any other absent or null field is taken as unset, as Go decodes it."""
    for field in ("metadata", "spec"):  # admission writes into both: a null one is no pod (Go would zero it)
        if field in pod and not isinstance(pod[field], Mapping):
            return f"{field} must be an object, got {_kind(pod[field])}"
    status = pod.get("status")
    if status is not None and not isinstance(status, Mapping):
        return f"status must be an object, got {_kind(status)}"
    meta = pod.get("metadata") or {}
    for field in _META_STRINGS:
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            return f"metadata.{field} must be a string, got {_kind(value)}"
    for field in ("annotations", "labels"):
        value = meta.get(field)
        if value is not None:
            error = _string_map_error(value, f"metadata.{field}")
            if error is not None:
                return error
    spec = pod.get("spec") or {}
    for field in _SPEC_STRINGS:
        value = spec.get(field)
        if value is not None and not isinstance(value, str):
            return f"spec.{field} must be a string, got {_kind(value)}"
    context = spec.get("securityContext")
    if context is not None and not isinstance(context, Mapping):
        return f"spec.securityContext must be an object, got {_kind(context)}"
    for group in ("initContainers", "containers"):
        ctrs = spec.get(group)
        if ctrs is None:
            continue
        if not isinstance(ctrs, list):
            return f"spec.{group} must be a list, got {_kind(ctrs)}"
        for i, ctr in enumerate(ctrs):
            error = _container_error(ctr, f"spec.{group}[{i}]")
            if error is not None:
                return error
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase is not None and not isinstance(phase, str):
        return f"status.phase must be a string, got {_kind(phase)}"
    statuses = status.get("initContainerStatuses")
    if statuses is not None:
        if not isinstance(statuses, list):
            return f"status.initContainerStatuses must be a list, got {_kind(statuses)}"
        for i, st in enumerate(statuses):
            where = f"status.initContainerStatuses[{i}]"
            if not isinstance(st, Mapping):
                return f"{where} must be an object, got {_kind(st)}"
            state = st.get("state")
            if state is not None and not isinstance(state, Mapping):
                return f"{where}.state must be an object, got {_kind(state)}"
            terminated = (state or {}).get("terminated")
            if terminated is not None and not isinstance(terminated, Mapping):
                return f"{where}.state.terminated must be an object, got {_kind(terminated)}"
    return None


def is_terminal(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    return (type(status) is dict or isinstance(status, Mapping)) and status.get("phase") in TERMINAL_PHASES


def init_containers_done(pod: Mapping[str, Any]) -> bool:
    """Every init container exited 0 (HAMi then books app containers only, spec §6.3)."""
    status = pod.get("status")
    statuses = status.get("initContainerStatuses") if isinstance(status, Mapping) else None
    if not statuses:
        return False
    for st in statuses:
        term = ((st or {}).get("state") or {}).get("terminated")
        if not term or term.get("exitCode") != 0:
            return False
    return True


def _quantity(value: Any, unit: float) -> int:
    try:
        return int(parse_quantity(value) / unit) if value is not None else 0
    except (WireFormatError, ZeroDivisionError, TypeError, ValueError):
        return 0  # an unreadable request counts as none; the API server would have refused it anyway


def host_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(CPU milli, memory MiB) the pod requests, as kube-scheduler counts it: max(init peak, app sum).

    A container without ``requests`` falls back to its ``limits`` (Kubernetes defaults requests to limits).
    """
    init, app = containers(pod)

    def req(ctr: Mapping[str, Any]) -> tuple[int, int]:
        res = ctr.get("resources")
        res = res if isinstance(res, Mapping) else {}
        limits, requests = res.get("limits"), res.get("requests")
        merged = {**(limits if isinstance(limits, Mapping) else {}),
                  **(requests if isinstance(requests, Mapping) else {})}
        return _quantity(merged.get("cpu"), 1 / 1000), _quantity(merged.get("memory"), 1024 * 1024)

    app_sum = [sum(v) for v in zip(*(req(c) for c in app), strict=False)] or [0, 0]
    init_peak = [max(v) for v in zip(*(req(c) for c in init), strict=False)] or [0, 0]
    return max(app_sum[0], init_peak[0]), max(app_sum[1], init_peak[1])


def pod_priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (set by admission from the PriorityClass); 0 when absent or not an integer, as kube's
    ``corev1helpers.PodPriority``."""
    spec = pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
