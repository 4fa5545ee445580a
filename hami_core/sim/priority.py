"""Pod priorities in a YAML workload, resolved as kube-apiserver's Priority admission plugin resolves them.

A pod naming ``priorityClassName`` gets that PriorityClass's ``value`` in ``spec.priority``; a pod naming a class the
workload file does not define is refused with its name and the field (the API server refuses it too). A pod naming
none gets the value of the class marked ``globalDefault`` (else keeps its own ``spec.priority``, else 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.engine.pods import metadata
from hami_core.plugins.objects import pod_ref
from hami_core.sim.loader import InputError

__all__ = ["resolve_priorities"]

#: PriorityClass values the API server accepts for user classes (above them: system-cluster-critical and the like)
MAX_USER_PRIORITY = 1_000_000_000


def resolve_priorities(pods: Sequence[dict[str, Any]], classes: Sequence[Mapping[str, Any]], *, source: str) -> None:
    """Set ``spec.priority`` of each pod from ``classes`` (PriorityClass objects), in place."""
    values: dict[str, int] = {}
    default: int | None = None
    for cls in classes:
        name = metadata(cls).get("name")
        value = cls.get("value")
        if not isinstance(name, str) or not name:
            raise InputError(f"{source}: a PriorityClass has no metadata.name")
        in_range = isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_USER_PRIORITY
        if not in_range:
            raise InputError(f"{source}: PriorityClass {name}: value must be an integer in "
                             f"[-{MAX_USER_PRIORITY}, {MAX_USER_PRIORITY}], got {value!r}")
        values[name] = value
        if cls.get("globalDefault") is True:
            if default is not None:
                raise InputError(f"{source}: PriorityClass {name}: globalDefault is set on more than one class")
            default = value
    for pod in pods:
        spec = pod.setdefault("spec", {})
        wanted = spec.get("priorityClassName")
        if wanted:
            if wanted not in values:
                raise InputError(f"{source}: pod {pod_ref(pod)}: spec.priorityClassName: no PriorityClass "
                                 f"{wanted!r} in the workload file")
            spec["priority"] = values[wanted]
        elif default is not None and "priority" not in spec:
            spec["priority"] = default
