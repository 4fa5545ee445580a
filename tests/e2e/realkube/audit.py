"""What each identity asked of the API server and what it got, from kube-apiserver's audit log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["Call", "calls", "forbidden"]

HAMI_USERS = ("system:serviceaccount:kube-system:hami-scheduler",
              "system:serviceaccount:kube-system:hami-device-plugin")


@dataclass(frozen=True)
class Call:
    user: str
    verb: str
    resource: str  # "pods", "pods/binding", "leases" ...
    group: str
    name: str
    namespace: str
    code: int
    at: datetime
    user_agent: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.user} {self.verb} {self.group or 'core'}/{self.resource} {where} -> {self.code}"


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def calls(events: Iterable[Mapping[str, Any]], users: Iterable[str] = HAMI_USERS, *,
          since: datetime | None = None) -> list[Call]:
    """The completed requests of ``users`` (one per audit ID), received at ``since`` or later."""
    wanted = set(users)
    out: dict[str, Call] = {}
    for ev in events:
        user = (ev.get("user") or {}).get("username", "")
        if user not in wanted or ev.get("stage") not in ("ResponseComplete", "Panic"):
            continue
        at = _time(ev.get("requestReceivedTimestamp") or ev.get("stageTimestamp"))
        if since is not None and at < since:
            continue
        ref = ev.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out[ev["auditID"]] = Call(user, ev.get("verb", ""), resource, ref.get("apiGroup", ""), ref.get("name", ""),
                                  ref.get("namespace", ""), int((ev.get("responseStatus") or {}).get("code") or 0),
                                  at, ev.get("userAgent", ""))
    return list(out.values())


def forbidden(found: Iterable[Call]) -> list[Call]:
    """The calls RBAC refused (HTTP 403)."""
    return [c for c in found if c.code == 403]


def summary(found: Iterable[Call]) -> Counter[tuple[str, str, str]]:
    """How many calls per (user, verb, resource)."""
    return Counter((c.user.rsplit(":", 1)[-1], c.verb, c.resource) for c in found)
