"""Accessors over Kubernetes object JSON (plain dicts): what every backend and the engine read.

No Kubernetes library: a scheduler-only embedding and a vendor plugin need none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["annotations", "containers", "metadata", "pod_key", "pod_ref"]


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
