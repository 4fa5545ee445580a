"""Small accessors over Kubernetes Pod JSON dicts (no Kubernetes library)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.wire.quantity import parse_quantity

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# ``type(x) is dict`` first: decoded JSON is plain dicts, and isinstance against the Mapping ABC costs ~10x more
# (these accessors run several times per pod on every watch event and bind).
def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if type(meta) is dict or isinstance(meta, Mapping) else {}


def annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    annos = metadata(obj).get("annotations")
    return annos if type(annos) is dict or isinstance(annos, Mapping) else {}


def pod_ref(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` for messages."""
    meta = metadata(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '<unnamed>'}"


def pod_key(pod: Mapping[str, Any]) -> str:
    """The ledger key: the pod UID, or ``namespace/name`` for pods that have none yet."""
    return str(metadata(pod).get("uid") or pod_ref(pod))


def containers(pod: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(init containers, app containers) of a pod."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    init = spec.get("initContainers") or []
    app = spec.get("containers") or []
    return ([c for c in init if isinstance(c, Mapping)] if isinstance(init, Sequence) else [],
            [c for c in app if isinstance(c, Mapping)] if isinstance(app, Sequence) else [])


def pod_shape_error(pod: Mapping[str, Any]) -> str | None:
    """Where a pod from a request body is not shaped like a Pod in the fields device plugins read (the API server
    never stores such a pod; a hand-written or fuzzed body can hold one): ``"spec.containers[0].resources must be
    an object, got int"``, or None. Checked before any plugin sees the pod, so a plugin may index these fields."""
    for field in ("metadata", "spec"):
        value = pod.get(field)
        if value is not None and not isinstance(value, Mapping):
            return f"{field} must be an object, got {type(value).__name__}"
    annos = metadata(pod).get("annotations")
    if annos is not None and not isinstance(annos, Mapping):
        return f"metadata.annotations must be an object, got {type(annos).__name__}"
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        ctrs = spec.get(group)
        if ctrs is None:
            continue
        if not isinstance(ctrs, list):
            return f"spec.{group} must be a list, got {type(ctrs).__name__}"
        for i, ctr in enumerate(ctrs):
            where = f"spec.{group}[{i}]"
            if not isinstance(ctr, Mapping):
                return f"{where} must be an object, got {type(ctr).__name__}"
            resources = ctr.get("resources")
            if resources is None:
                continue
            if not isinstance(resources, Mapping):
                return f"{where}.resources must be an object, got {type(resources).__name__}"
            for kind in ("limits", "requests"):
                values = resources.get(kind)
                if values is not None and not isinstance(values, Mapping):
                    return f"{where}.resources.{kind} must be an object, got {type(values).__name__}"
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
