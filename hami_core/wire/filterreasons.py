"""``hami.io/filter-reasons``: the per-node reasons of a pod's last failed filter, kept on the pod (bounded).

kube-scheduler keeps an extender's per-node reasons only in its own ``PodScheduled`` condition message, cut and
rewritten by every attempt, and HAMi's ``FilteringFailed`` events expire after an hour. The scheduler therefore
writes a summary of the last failed filter on the pod itself, where ``kubectl get pod -o yaml`` and
``hami explain`` find it as long as the pod is pending. The value is compact JSON, grouped by reason (nodes that
failed for the same reason share one entry), with no timestamp, so the same refusal encodes to the same text and
is never written twice:

``{"nodes":12,"failed":12,"reasons":[{"reason":"2/2 CardInsufficientMemory","count":9,"nodes":["n1","n2"],
"more":7}],"more":{"reasons":0,"nodes":0}}``

- ``nodes``: the candidates the filter was given; ``failed``: those it rejected; ``error``: why the pod could not be
  scheduled at all (then there are no reasons);
- ``reasons``: most nodes first, then by reason text; ``nodes`` names at most :data:`MAX_NODES_PER_REASON` of a
  reason's nodes (sorted) and at most :data:`MAX_NODES` in all, ``more`` counts the others ("+N more nodes");
- ``more``: the reasons (and their nodes) left out to stay within :data:`MAX_BYTES`.

Pure functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["FILTER_REASONS", "MAX_BYTES", "MAX_NODES", "MAX_NODES_PER_REASON", "MAX_REASON_CHARS", "decode",
           "summarize"]

FILTER_REASONS = "hami.io/filter-reasons"
#: The annotation's size limit (the API server allows 256 KiB for all of a pod's annotations together: a pending
#: pod must never be pushed near it by its reasons).
MAX_BYTES = 4096
#: Node names listed in all, and per reason.
MAX_NODES = 20
MAX_NODES_PER_REASON = 5
#: A reason text longer than this is cut (a quarantined node's reason quotes the annotation that broke it).
MAX_REASON_CHARS = 300


def summarize(failed: Mapping[str, str], total: int, *, error: str | None = None) -> str:
    """The annotation value for a filter that rejected ``failed`` (node → reason) of ``total`` candidates, or could
    not schedule the pod at all (``error``). Deterministic: the same refusal gives the same text."""
    doc: dict[str, Any] = {"nodes": total, "failed": len(failed)}
    if error:
        doc["error"] = _cut(error)
        return _dump(doc)
    by_reason: dict[str, list[str]] = {}
    for node, reason in failed.items():
        by_reason.setdefault(_cut(reason), []).append(node)
    ordered = sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))
    # Groups are added while they fit, each measured once: thousands of distinct reasons must not cost thousands of
    # encodings of the whole document. The reserve covers the header, the "more" object and the separators.
    budget = MAX_BYTES - len(_dump(doc).encode()) - 80
    named = 0
    groups: list[dict[str, Any]] = []
    more = {"reasons": 0, "nodes": 0}
    for reason, nodes in ordered:
        take = max(0, min(MAX_NODES_PER_REASON, MAX_NODES - named, len(nodes)))
        group = {"reason": reason, "count": len(nodes), "nodes": sorted(nodes)[:take], "more": len(nodes) - take}
        size = len(_dump(group).encode()) + 1
        if size > budget:
            more["reasons"] += 1
            more["nodes"] += len(nodes)
            continue
        budget -= size
        named += take
        groups.append(group)
    doc["reasons"] = groups
    doc["more"] = more
    text = _dump(doc)
    while len(text.encode()) > MAX_BYTES and groups:  # (the reserve makes this a safety net)
        gone = groups.pop()
        more["reasons"] += 1
        more["nodes"] += gone["count"]
        text = _dump(doc)
    return text


def decode(text: str) -> dict[str, Any] | None:
    """The annotation's JSON object, or ``None`` when ``text`` is not one (a hand-edited value)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


def _dump(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
