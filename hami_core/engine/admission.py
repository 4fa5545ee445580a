"""Admission: the pod as HAMi's mutating webhook would change it (spec §4.3)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.engine.config import SchedulerConfig
from hami_core.engine.pods import pod_ref
from hami_core.plugins.errors import AdmissionDenied, PluginError
from hami_core.plugins.types import DeviceBackend, Mutation

DEFAULT_SCHEDULER = "default-scheduler"


def for_other_scheduler(pod: Mapping[str, Any], cfg: SchedulerConfig) -> bool:
    """The pod targets another scheduler, so admission leaves it alone (and HAMi skips its quota pre-check)."""
    spec = pod.get("spec")
    current = (spec.get("schedulerName") if isinstance(spec, Mapping) else "") or ""
    ours = cfg.scheduler_name
    return bool(current) and (current != DEFAULT_SCHEDULER or not cfg.force_overwrite_default_scheduler) and (
        not ours or current != ours)


def admit(hook: Any, backends: Sequence[DeviceBackend], pod: Mapping[str, Any], cfg: SchedulerConfig) -> dict[str, Any]:
    """Return a mutated copy of ``pod``; raise :class:`AdmissionDenied` where HAMi denies it.

    Pods that target another scheduler are returned unchanged. Every backend mutates every init and
    app container; if any container requests a managed device the scheduler name is set.
    """
    out = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise AdmissionDenied(f"pod {pod_ref(pod)}: pod has no containers")
    ours = cfg.scheduler_name
    if for_other_scheduler(out, cfg):
        return out
    ctrs = [*(spec.get("initContainers") or []), *spec["containers"]]
    privileged = next((c for c in ctrs if ((c.get("securityContext") or {}).get("privileged") is True)), None)
    requested = False
    for ctr in ctrs:
        for backend in backends:
            result = hook.hami_mutate_container(backend=backend, pod=out, container=ctr)
            if result is None:
                continue
            if not isinstance(result, Mutation):
                raise PluginError(f"plugin {backend.plugin!r}: hami_mutate_container returned {result!r}, "
                                  "expected Mutation")
            requested = requested or result.requested
    if not requested:
        return out
    if privileged is not None:
        raise AdmissionDenied(f"pod {pod_ref(pod)}: container {privileged.get('name')} is privileged")
    if ours:
        spec["schedulerName"] = ours
        if spec.get("nodeName"):
            raise AdmissionDenied(f"pod {pod_ref(pod)}: pod has node assigned")
    return out
