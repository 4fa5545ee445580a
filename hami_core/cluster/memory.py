"""An in-process cluster: Node and Pod objects in memory, scheduled by an :class:`Engine`.

It plays the parts the real cluster plays around the engine (admission webhook, extender filter,
reserve, the annotation patch, bind), without a Kubernetes API. The simulator and tests use it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_core.engine.decision import Decision
from hami_core.engine.facade import Engine, NodeStatus
from hami_core.engine.pods import pod_key, pod_ref
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.wire import keys


@dataclass(frozen=True, slots=True)
class Placement:
    """What happened to one submitted pod."""

    pod: str
    decision: Decision | None
    denied: str | None = None

    @property
    def node(self) -> str | None:
        return self.decision.node if self.decision is not None else None


class MemoryCluster:
    """Nodes and pods held in dicts; :meth:`submit` runs admission, filter, reserve and bind."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}

    def add_node(self, node: Mapping[str, Any]) -> NodeStatus:
        obj = copy.deepcopy(dict(node))
        status = self.engine.upsert_node(obj)
        annos = obj.setdefault("metadata", {}).setdefault("annotations", {})
        for k, v in status.patch.items():  # the handshake mark the scheduler writes back
            if v is None:
                annos.pop(k, None)
            else:
                annos[k] = v
        self.nodes[status.name] = obj
        return status

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        """Add an already-scheduled pod (it books usage if it carries HAMi annotations)."""
        obj = copy.deepcopy(dict(pod))
        self.pods[pod_key(obj)] = obj
        self.engine.upsert_pod(obj)

    def submit(self, pod: Mapping[str, Any], *, bind: bool = True) -> Placement:
        """Admit, schedule, reserve and (optionally) bind one new pod."""
        ref = pod_ref(pod)
        try:
            admitted = self.engine.admit(pod)
        except (AdmissionDenied, AdmissionFailed) as exc:
            return Placement(ref, None, str(exc))
        decision = self.engine.schedule(admitted, list(self.nodes))
        if decision.node is None:
            return Placement(ref, decision)
        self.engine.reserve(admitted, decision)
        meta = admitted.setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(decision.annotations)
        meta.setdefault("labels", {})[keys.VGPU_NODE] = decision.node
        if bind:
            meta["annotations"][keys.BIND_PHASE] = keys.BIND_PHASE_ALLOCATING
            meta["annotations"][keys.BIND_TIME] = decision.annotations[keys.VGPU_TIME]
            admitted.setdefault("spec", {})["nodeName"] = decision.node
            self.engine.hook.hami_pod_bound(pod=admitted, node=decision.node)
        self.pods[pod_key(admitted)] = admitted
        self.engine.upsert_pod(admitted)  # what the pod watch would deliver after the patch
        return Placement(ref, decision)

    def delete_pod(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            self.engine.remove_pod(pod)
