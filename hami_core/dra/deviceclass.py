"""DeviceClasses (resource.k8s.io/v1), one per backend: what a ResourceClaim names to get that backend's devices.

Each class selects its driver's devices by CEL (``device.driver == "<driver>"``) and is named by
:func:`~hami_core.dra.model.device_class_name` (``hami-core-gpu.project-hami.io`` for NVIDIA, HAMi-DRA's name).
The chart ships them (``charts/hami-py/templates/dra-deviceclasses.yaml``, from the same names); the functions
here give the objects to tests, ``hami dra-driver --dry-run`` and anyone who applies them by API.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hami_core.dra.model import DOMAIN, device_class_name, driver_name

__all__ = ["API_VERSION", "BACKEND_ANNOTATION", "KIND", "device_class", "device_classes", "selector_expression"]

API_VERSION = "resource.k8s.io/v1"
KIND = "DeviceClass"
#: Annotation naming the backend (common word) a class is for, so tools map a class back without parsing names.
BACKEND_ANNOTATION = f"dra.{DOMAIN}/backend"


def selector_expression(backend: str) -> str:
    """The CEL selector of ``backend``'s class: its driver's devices."""
    return f'device.driver == "{driver_name(backend)}"'


def device_class(backend: str, *, extended_resource_name: str | None = None) -> dict[str, Any]:
    """The DeviceClass of ``backend`` (its common word). ``extended_resource_name`` (KEP-5004) lets pods that ask
    for that extended resource be given the class's devices by kube-scheduler itself; off by default, since hami's
    translating webhook rewrites HAMi requests into claims instead (and a node must not serve both modes)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector_expression(backend)}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": device_class_name(backend), "annotations": {BACKEND_ANNOTATION: backend}},
            "spec": spec}


def device_classes(backends: Iterable[str]) -> list[dict[str, Any]]:
    """One DeviceClass per backend, sorted by name, each name once."""
    by_name = {device_class_name(b): device_class(b) for b in backends}
    return [by_name[name] for name in sorted(by_name)]
