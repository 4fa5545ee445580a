"""PodDisruptionBudgets as kube-scheduler's preemption reads them: which victims would break one.

kube-scheduler (``filterPodsWithPDBViolation``) walks the victims in order, takes one disruption from every PDB of
the victim's namespace whose selector matches its labels (a victim the PDB already lists in
``status.disruptedPods`` takes none), and calls a victim *violating* when some matching PDB goes below zero. It
still evicts such pods, but prefers nodes and victim sets with fewer of them. An empty or absent selector matches
no pod there, unlike a Deployment's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.engine.pods import metadata

__all__ = ["selector_matches", "violations"]


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``) against ``labels``. An empty or
    malformed selector matches nothing (a PDB whose selector cannot be read protects no pod, rather than all)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if not match_labels and not expressions:
        return False
    if any(labels.get(str(k)) != str(v) for k, v in match_labels.items()):
        return False
    return all(_expression(e, labels) for e in expressions)


def _expression(expression: Any, labels: Mapping[str, str]) -> bool:
    if not isinstance(expression, Mapping):
        return False
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return False
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    return False


def violations(victims: Sequence[Mapping[str, Any]], pdbs: Sequence[Mapping[str, Any]]) -> list[bool]:
    """For each victim (in eviction order), whether evicting it breaks a PodDisruptionBudget (kube's rule above)."""
    allowed = []
    for pdb in pdbs:
        status = pdb.get("status")
        value = status.get("disruptionsAllowed") if isinstance(status, Mapping) else None
        allowed.append(value if isinstance(value, int) and not isinstance(value, bool) else 0)
    out = []
    for pod in victims:
        meta = metadata(pod)
        labels = meta.get("labels")
        labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        namespace, name = meta.get("namespace") or "default", meta.get("name")
        violated = False
        if labels:
            for i, pdb in enumerate(pdbs):
                pmeta = metadata(pdb)
                if (pmeta.get("namespace") or "default") != namespace:
                    continue
                spec = pdb.get("spec")
                if not selector_matches(spec.get("selector") if isinstance(spec, Mapping) else None, labels):
                    continue
                status = pdb.get("status")
                disrupted = status.get("disruptedPods") if isinstance(status, Mapping) else None
                if isinstance(disrupted, Mapping) and name in disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        out.append(violated)
    return out
