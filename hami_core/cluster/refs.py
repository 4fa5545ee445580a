"""How the scheduler names a pod and orders object versions.

:class:`PodRef` is the one pod reference type of the scheduler side: (namespace, name), as a request, a watch cache
and a node lock name a pod. It is a tuple, so it equals and hashes as the plain ``(namespace, name)`` pair (and is
one as a dictionary key). The engine's ledger keys pods by UID instead (:func:`hami_core.plugins.objects.pod_key`).

:func:`resource_version` reads ``metadata.resourceVersion`` as etcd's revision number, one counter across all
objects, so versions of any two objects can be ordered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from hami_core.plugins.objects import metadata

__all__ = ["PodRef", "parse_version", "resource_version"]


class PodRef(NamedTuple):
    """A pod's (namespace, name); the namespace defaults to ``default`` as the API server's does."""

    namespace: str
    name: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodRef:
        """The reference of a pod object (or anything with a pod's ``metadata``)."""
        meta = metadata(pod)
        return cls(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def stub(self, uid: str) -> dict[str, Any]:
        """A minimal pod object naming this pod and ``uid`` (what the engine's ledger calls need of a pod that is
        gone or not at hand)."""
        return {"metadata": {"namespace": self.namespace, "name": self.name, "uid": uid}}


def parse_version(raw: Any) -> int | None:
    """A resourceVersion as a number, or None when it is absent or not a number (then it cannot be ordered)."""
    if type(raw) is str and raw.isdigit():
        return int(raw)
    return None


def resource_version(obj: Mapping[str, Any]) -> int | None:
    """``metadata.resourceVersion`` of ``obj`` as a number (:func:`parse_version`)."""
    return parse_version(metadata(obj).get("resourceVersion"))
