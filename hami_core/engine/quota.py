"""The quota cache (spec §11.1): per namespace and resource, the ResourceQuota limit and the scheduler's own usage.

Limits come from ResourceQuota objects: every ``spec.hard`` key ``limits.<name>`` where ``<name>`` is some backend's
memory or core resource name and the quantity is an exact integer (``requests.*`` keys and other resources are
ignored; an unusable quantity is skipped with one warning naming the object and the key). Several objects in a
namespace limiting the same resource: the one processed last wins. Deleting an object drops its limits (the usage
stays); when another object of the namespace also limits that resource, its limit applies again (HAMi leaves the
resource unlimited until that object is next updated).

Usage is not ``status.used`` but what the engine books: every booking in the ledger (reservations and scheduled
pods, collapsed as booked: init containers as a peak, app containers as a sum) charges its namespace the memory
and cores it holds, per backend resource name. Charges are kept per pod key, so booking a pod again replaces its
charge and removing it takes back exactly what it added: usage can neither double nor leak, whatever the order of
reserve, watch updates and deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, DeviceBackend, QuotaEntry, QuotaView
from hami_core.wire.quantity import quantity_to_int

log = logging.getLogger("hami.engine.quota")

LIMITS_PREFIX = "limits."
_UNNAMED = ("", "")

__all__ = ["QuotaCache", "QuotaUsage", "quota_ref"]


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """One row of :meth:`QuotaCache.usage` (what the ``hami_resource_quota_*`` metrics show)."""

    namespace: str
    resource: str
    used: int
    limit: int | None  # None: no limit set


def quota_ref(obj: Mapping[str, Any]) -> tuple[str, str]:
    """``(namespace, name)`` of a ResourceQuota object (namespace defaults to ``default``)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class QuotaCache:
    """Limits by (namespace, resource) from ResourceQuota objects, usage from the engine's bookings."""

    def __init__(self, backends: Iterable[DeviceBackend]) -> None:
        #: backend name → (memory resource name, core resource name); "" where the backend has none
        self._names: dict[str, tuple[str, str]] = {
            b.name: (b.resource_names.memory, b.resource_names.cores) for b in backends}
        self.managed = frozenset(n for pair in self._names.values() for n in pair if n)
        #: namespace → resource → {quota object name: limit}, in processing order (the last one wins); a namespace
        #: is present only while something in it is limited (the fit path asks this first)
        self._limits: dict[str, dict[str, dict[str, int]]] = {}
        #: (namespace, quota object name) → the resources it limits
        self._objects: dict[tuple[str, str], tuple[str, ...]] = {}
        self._used: dict[tuple[str, str], int] = {}
        #: pod key → (namespace, {resource: amount}) it is charged
        self._charges: dict[str, tuple[str, dict[str, int]]] = {}
        self._warned: set[tuple[str, str, str, str]] = set()

    # ------------------------------------------------------------------------------------ limits
    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Add or update a ResourceQuota (JSON). An update replaces everything the object limited before."""
        namespace, name = quota_ref(obj)
        limits = self._read_limits(obj, namespace, name)
        self._drop_object(namespace, name)
        for resource, value in limits.items():
            self._limits.setdefault(namespace, {}).setdefault(resource, {})[name] = value
        if limits:
            self._objects[(namespace, name)] = tuple(limits)

    def remove(self, obj: Mapping[str, Any]) -> None:
        """Forget a deleted ResourceQuota's limits; usage is kept."""
        self._drop_object(*quota_ref(obj))

    def _drop_object(self, namespace: str, name: str) -> None:
        resources = self._limits.get(namespace)
        for resource in self._objects.pop((namespace, name), ()):
            per_object = resources.get(resource) if resources is not None else None
            if per_object is None:
                continue
            per_object.pop(name, None)
            if not per_object:
                del resources[resource]  # type: ignore[union-attr]
        if resources is not None and not resources:
            del self._limits[namespace]

    def _read_limits(self, obj: Mapping[str, Any], namespace: str, name: str) -> dict[str, int]:
        spec = obj.get("spec")
        hard = spec.get("hard") if isinstance(spec, Mapping) else None
        if not isinstance(hard, Mapping):
            return {}
        out: dict[str, int] = {}
        for key, raw in hard.items():
            if not isinstance(key, str) or not key.startswith(LIMITS_PREFIX):
                continue
            resource = key[len(LIMITS_PREFIX):]
            if resource not in self.managed:
                continue
            try:
                value = quantity_to_int(raw)
                why = "not a whole number" if value is None else ("negative" if value < 0 else "")
            except WireFormatError as exc:
                value, why = None, str(exc)
            if value is None or why:
                self._warn(namespace, name, key, raw, why)
                continue
            out[resource] = value
        return out

    def _warn(self, namespace: str, name: str, key: str, raw: Any, why: str) -> None:
        """One warning per object, key and value: the informer re-delivers every object on resync."""
        seen = (namespace, name, key, repr(raw))
        if seen in self._warned:
            return
        self._warned.add(seen)
        log.warning("ResourceQuota %s/%s: spec.hard[%s] = %r ignored: HAMi needs an exact integer (%s)",
                    namespace, name, key, raw, why)

    # ------------------------------------------------------------------------------------ usage
    def charge(self, key: str, namespace: str, devices: Mapping[str, tuple[ContainerDevice, ...]]) -> None:
        """Charge ``namespace`` what a pod's booking holds, replacing any earlier charge of the pod."""
        amounts: dict[str, int] = {}
        names = self._names
        for backend, devs in devices.items():
            mem_name, core_name = names.get(backend, _UNNAMED)
            mem = cores = 0
            for d in devs:
                mem += d.usedmem
                cores += d.usedcores
            if mem_name:
                amounts[mem_name] = amounts.get(mem_name, 0) + mem
            if core_name:
                amounts[core_name] = amounts.get(core_name, 0) + cores
        if key in self._charges:
            self.release(key)
        if amounts:
            self._charges[key] = (namespace, amounts)
            used = self._used
            for resource, amount in amounts.items():
                used[(namespace, resource)] = used.get((namespace, resource), 0) + amount

    def release(self, key: str) -> None:
        """Take back a pod's charge (idempotent)."""
        charge = self._charges.pop(key, None)
        if charge is None:
            return
        namespace, amounts = charge
        used = self._used
        for resource, amount in amounts.items():
            # never below 0 (HAMi clamps; with per-pod charges it cannot happen, but a bad plugin value must not
            # turn into credit)
            used[(namespace, resource)] = max(0, used.get((namespace, resource), 0) - amount)

    # ------------------------------------------------------------------------------------ reads
    def limited(self, namespace: str) -> bool:
        """Whether any resource of ``namespace`` has a limit (a dict lookup: the fit path's fast exit)."""
        return namespace in self._limits

    def limit(self, namespace: str, resource: str) -> int | None:
        """The limit in force (the last processed object's), or ``None``."""
        per_object = self._limits.get(namespace, {}).get(resource)
        return next(reversed(per_object.values())) if per_object else None

    def used(self, namespace: str, resource: str) -> int:
        return self._used.get((namespace, resource), 0)

    def charged(self, key: str) -> Mapping[str, int]:
        """What pod ``key`` is charged, by resource."""
        charge = self._charges.get(key)
        return dict(charge[1]) if charge is not None else {}

    def view(self, namespace: str, own: str | None = None) -> QuotaView | None:
        """The namespace's limited resources for a fit, with pod ``own``'s earlier charge left out; ``None`` when
        nothing in the namespace is limited."""
        resources = self._limits.get(namespace)
        if resources is None:
            return None
        mine = self._charges.get(own) if own is not None else None
        mine_amounts = mine[1] if mine is not None and mine[0] == namespace else {}
        entries = {}
        for resource, per_object in resources.items():
            used = self._used.get((namespace, resource), 0) - mine_amounts.get(resource, 0)
            entries[resource] = QuotaEntry(next(reversed(per_object.values())), max(0, used))
        return QuotaView(namespace, entries)

    def usage(self) -> list[QuotaUsage]:
        """Every (namespace, resource) with a limit or with usage ever booked, sorted (for metrics)."""
        limited = {(ns, res) for ns, resources in self._limits.items() for res in resources}
        keys = sorted(set(self._used) | limited)
        return [QuotaUsage(ns, res, self._used.get((ns, res), 0), self.limit(ns, res)) for ns, res in keys]
