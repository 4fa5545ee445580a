"""Lease-based leader election on ``coordination.k8s.io/v1`` Leases (client-go's algorithm, in small).

Every ``retry_period_s`` each candidate reads the Lease ``namespace/name``:

* absent: create it holding it (``409 AlreadyExists``: someone else was first);
* held by us: renew (``renewTime``);
* held by someone else: take it over only when the record has not changed for ``lease_duration_s``, judged on
  this process's own clock from when it *observed* the record change (so clocks need not agree across hosts).

Renewals and takeovers are merge patches carrying the Lease's ``metadata.resourceVersion``: a concurrent writer
makes the write fail with 409 and this candidate loses. A leader that has not renewed for ``renew_deadline_s``
(< ``lease_duration_s``) stops calling itself leader, before any rival can take over.

With ``campaign=False`` the elector never writes: it only follows the Lease and is leader while the holder's
identity starts with ``identity`` and the record is fresh. That is what the HAMi extender does at HEAD (spec
§9.5): it follows the co-located kube-scheduler's Lease (holder ``<hostname>_<uuid>``), ``identity`` being the
hostname.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("hami.cluster.leader")

MERGE_PATCH = "application/merge-patch+json"


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate in a Lease election. Thread-safe; :meth:`run` is the loop, or call
    :meth:`try_acquire_or_renew` yourself every ``retry_period_s``."""

    def __init__(self, api_client: Any, *, namespace: str, name: str, identity: str, lease_duration_s: float = 15,
                 renew_deadline_s: float = 10, retry_period_s: float = 2, clock: Callable[[], float] = time.time,
                 campaign: bool = True, on_change: Callable[[bool], None] | None = None) -> None:
        from kubernetes import client

        if not renew_deadline_s < lease_duration_s:
            raise ValueError("renew_deadline_s must be shorter than lease_duration_s")
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.campaign = campaign
        self.on_change = on_change
        self._lock = threading.RLock()
        self._observed: tuple[Any, ...] | None = None  # (holder, renewTime, acquireTime, transitions, rv)
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # when we last held it (campaign) / saw it fresh (follow)
        self._was_leader = False

    # ------------------------------------------------------------------------------------ API
    def _read(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False,
                                                  _request_timeout=self.renew_deadline_s)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(resp.data)

    def _spec(self, now: float, lease: dict[str, Any] | None) -> dict[str, Any]:
        old = (lease or {}).get("spec") or {}
        ours = old.get("holderIdentity") == self.identity
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration_s),
                "acquireTime": old.get("acquireTime") if ours and old.get("acquireTime") else _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if ours or lease is None else 1)}

    # ------------------------------------------------------------------------------------ election
    def try_acquire_or_renew(self) -> bool:
        """One round: read the Lease, then create, renew or take it over as the rules allow. Returns
        :meth:`is_leader` afterwards. API failures count as a failed round (logged, not raised)."""
        from kubernetes.client.exceptions import ApiException

        with self._lock:
            now = self.clock()
            try:
                lease = self._read()
                if lease is None:
                    if self.campaign:
                        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                "metadata": {"name": self.name, "namespace": self.namespace},
                                "spec": self._spec(now, None)}
                        self.api.create_namespaced_lease(self.namespace, body, _preload_content=False,
                                                         _request_timeout=self.renew_deadline_s).read()
                        self._renewed_at = now
                    else:
                        self._renewed_at = None
                    self._observed = None
                    return self._report()
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                record = (holder, spec.get("renewTime"), spec.get("acquireTime"), spec.get("leaseTransitions"),
                          lease["metadata"].get("resourceVersion"))
                if record[:4] != (self._observed or (None,) * 5)[:4]:
                    self._observed, self._observed_at = record, now
                duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
                expired = not holder or self._observed_at + duration <= now
                if not self.campaign:
                    fresh = holder.startswith(self.identity) and not expired
                    self._renewed_at = now if fresh else None
                    return self._report()
                if holder != self.identity and not expired:
                    return self._report()
                patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                         "spec": self._spec(now, lease)}
                resp = self.api.patch_namespaced_lease(self.name, self.namespace, patch, _content_type=MERGE_PATCH,
                                                       _preload_content=False, _request_timeout=self.renew_deadline_s)
                updated = json.loads(resp.data)
                uspec = updated.get("spec") or {}
                self._observed = (uspec.get("holderIdentity"), uspec.get("renewTime"), uspec.get("acquireTime"),
                                  uspec.get("leaseTransitions"), updated["metadata"].get("resourceVersion"))
                self._observed_at = now
                self._renewed_at = now
            except ApiException as exc:
                if exc.status == 409:
                    log.debug("lease %s/%s: lost the race (409)", self.namespace, self.name)
                else:
                    log.warning("lease %s/%s: HTTP %s: %s", self.namespace, self.name, exc.status, exc.reason)
            except Exception as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, " ".join(str(exc).split()))
            return self._report()

    def is_leader(self) -> bool:
        """Whether we hold the Lease: our last successful renewal is younger than ``renew_deadline_s`` (following:
        the holder matched and was fresh at the last round, and that round is younger than ``lease_duration_s``)."""
        with self._lock:
            if self._renewed_at is None:
                return False
            limit = self.renew_deadline_s if self.campaign else self.lease_duration_s
            return self.clock() - self._renewed_at < limit

    def _report(self) -> bool:
        leader = self.is_leader()
        if leader != self._was_leader:
            self._was_leader = leader
            log.info("lease %s/%s: %s is %s", self.namespace, self.name, self.identity,
                     "now the leader" if leader else "no longer the leader")
            if self.on_change is not None:
                try:
                    self.on_change(leader)
                except Exception:
                    log.exception("leader on_change callback failed")
        return leader

    def run(self, stop_event: threading.Event) -> None:
        """Campaign (or follow) every ``retry_period_s`` until ``stop_event`` is set, then :meth:`release`."""
        try:
            while not stop_event.is_set():
                self.try_acquire_or_renew()
                stop_event.wait(self.retry_period_s)
        finally:
            self.release()

    def release(self) -> None:
        """Give the Lease up if we hold it (an expired ``renewTime`` and empty holder, so others take over at
        once); never raises."""
        with self._lock:
            was = self.is_leader()
            self._renewed_at = None
            if self.campaign and was:
                try:
                    lease = self._read()
                    if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                        patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                                 "spec": {"holderIdentity": None, "leaseDurationSeconds": 1,
                                          "renewTime": _micro_time(self.clock())}}
                        self.api.patch_namespaced_lease(self.name, self.namespace, patch, _content_type=MERGE_PATCH,
                                                        _preload_content=False,
                                                        _request_timeout=self.renew_deadline_s).read()
                except Exception as exc:
                    log.warning("lease %s/%s: release failed: %s", self.namespace, self.name,
                                " ".join(str(exc).split()))
            self._report()
