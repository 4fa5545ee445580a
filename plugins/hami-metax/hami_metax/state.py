"""Scheduler-side memory of the MetaX sGPU backend, one instance per engine (vendors.md G.2).

HAMi's ``MetaxSDevices`` keeps a "jittery QoS" cache (``qos.go``) and reads the app class of the pods
on each device from its pod cache (``DeviceUsage.PodInfos``). hami-core hands plugins device usage
without the pods behind it, so the backend keeps both pieces of state itself, as fields of
:class:`hami_metax.sgpu.SgpuBackend`; every engine builds its own backends, so every engine has its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

ONLINE = "online"
OFFLINE = "offline"


class JitteryQosCache:
    """Devices whose QoS policy the scheduler expects to change (HAMi ``JitteryQosCache``).

    A decision that puts a shared (non-exclusive) pod on a device whose registered QoS differs from the
    pod's records the expected QoS here; until the device plugin registers that QoS, later fits use the
    expected value instead of the registered one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, str] = {}

    def sync(self, registered: Iterable[tuple[str, str]]) -> None:
        """Forget every device whose registration ``(uuid, qosPolicy)`` now reports the expected QoS."""
        with self._lock:
            for uuid, qos in registered:
                if self._cache.get(uuid, None) == qos:
                    del self._cache[uuid]

    def add(self, uuid: str, expected: str) -> None:
        with self._lock:
            self._cache[uuid] = expected

    def get(self, uuid: str) -> str | None:
        """The expected QoS of ``uuid``, or ``None`` when the device is not in transition."""
        with self._lock:
            return self._cache.get(uuid)

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._cache)


class PodClasses:
    """App class (``metax-tech.com/sgpu-app-class``) of the pods holding each sGPU device.

    Stands in for HAMi's ``DeviceUsage.PodInfos``. A pod is recorded when the engine decodes its
    allocation (pod add/update) and when a decision for it is annotated (HAMi's Filter adds the pod to
    its cache at that point too). hami-core does not tell plugins when a pod goes away, so callers treat
    a device without any booked usage as idle and drop it from here (:meth:`forget_device`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, frozenset[str]]] = {}
        self._by_uuid: dict[str, set[str]] = {}

    def record(self, pod_key: str, app_class: str, uuids: Iterable[str]) -> None:
        """Remember that pod ``pod_key`` (of class ``app_class``, ``""`` = none) holds ``uuids``."""
        devices = frozenset(uuids)
        with self._lock:
            self._drop(pod_key)
            if not devices:
                return
            self._pods[pod_key] = (app_class, devices)
            for uuid in devices:
                self._by_uuid.setdefault(uuid, set()).add(pod_key)

    def discard(self, pod_key: str) -> None:
        with self._lock:
            self._drop(pod_key)

    def counts(self, uuid: str, *, exclude: str = "") -> tuple[int, int]:
        """``(online, offline)`` pods on ``uuid``, not counting the pod ``exclude``."""
        online = offline = 0
        with self._lock:
            for key in self._by_uuid.get(uuid, ()):
                if key == exclude:
                    continue
                app_class = self._pods[key][0]
                if app_class == ONLINE:
                    online += 1
                elif app_class == OFFLINE:
                    offline += 1
        return online, offline

    def pods_on(self, uuid: str) -> frozenset[str]:
        with self._lock:
            return frozenset(self._by_uuid.get(uuid, ()))

    def forget_device(self, uuid: str, *, keep: str = "") -> None:
        """Drop ``uuid`` from every pod but ``keep``: nothing is booked on it, so those entries are stale."""
        with self._lock:
            for key in list(self._by_uuid.get(uuid, ())):
                if key == keep:
                    continue
                app_class, devices = self._pods[key]
                self._by_uuid[uuid].discard(key)
                rest = devices - {uuid}
                if rest:
                    self._pods[key] = (app_class, rest)
                else:
                    del self._pods[key]
            if not self._by_uuid.get(uuid):
                self._by_uuid.pop(uuid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def _drop(self, pod_key: str) -> None:
        old = self._pods.pop(pod_key, None)
        if old is None:
            return
        for uuid in old[1]:
            keys = self._by_uuid.get(uuid)
            if keys is not None:
                keys.discard(pod_key)
                if not keys:
                    del self._by_uuid[uuid]
