"""Which pods a defragmenter may move: owned by a controller, not labelled do-not-move, allowed by their PDBs.

PodDisruptionBudgets are counted as the Eviction API counts them: a pod covered by more than one PDB cannot be
evicted; a PDB whose status is older than its spec (``observedGeneration < generation``) allows nothing; otherwise
each eviction spends one of ``status.disruptionsAllowed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.cluster.selectors import selector_matches

#: Label that keeps a pod where it is (value "false": never moved).
DO_NOT_MOVE = "hami.io/defrag"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def controller_owner(pod: Mapping[str, Any]) -> str | None:
    """``Kind/name`` of the pod's controller (an ownerReference with ``controller: true``), or ``None``: nobody
    would recreate the pod after an eviction."""
    for ref in _meta(pod).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return f"{ref.get('kind', '')}/{ref.get('name', '')}"
    return None


def pinned(pod: Mapping[str, Any]) -> bool:
    """The pod carries ``hami.io/defrag: "false"``."""
    labels = _meta(pod).get("labels") or {}
    return str(labels.get(DO_NOT_MOVE, "")).lower() == "false"


class DisruptionBudgets:
    """What each PDB still allows, spent as moves are planned."""

    def __init__(self, pdbs: Sequence[Mapping[str, Any]]) -> None:
        self._pdbs = list(pdbs)
        self.allowed: dict[str, int] = {}
        for pdb in self._pdbs:
            meta, status = _meta(pdb), pdb.get("status") or {}
            fresh = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
            self.allowed[self._key(pdb)] = int(status.get("disruptionsAllowed") or 0) if fresh else 0

    @staticmethod
    def _key(pdb: Mapping[str, Any]) -> str:
        meta = _meta(pdb)
        return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"

    def covering(self, pod: Mapping[str, Any]) -> list[str]:
        """The PDBs whose selector matches the pod (same namespace)."""
        meta = _meta(pod)
        ns, labels = meta.get("namespace", "default"), meta.get("labels") or {}
        return [self._key(p) for p in self._pdbs if _meta(p).get("namespace", "default") == ns
                and selector_matches((p.get("spec") or {}).get("selector"), labels)]

    def why_not(self, pods: Sequence[Mapping[str, Any]]) -> str | None:
        """Why evicting all of ``pods`` now would be refused by a PDB, or ``None``."""
        need: dict[str, int] = {}
        for pod in pods:
            keys = self.covering(pod)
            if len(keys) > 1:
                return f"pod {_meta(pod).get('name')} is covered by more than one PodDisruptionBudget"
            for k in keys:
                need[k] = need.get(k, 0) + 1
        for k, n in need.items():
            if n > self.allowed[k]:
                return f"PodDisruptionBudget {k} allows {self.allowed[k]} disruption(s)"
        return None

    def spend(self, pods: Sequence[Mapping[str, Any]]) -> None:
        for pod in pods:
            for k in self.covering(pod):
                self.allowed[k] -= 1
