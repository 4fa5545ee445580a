"""The interface between the scheduler and where Kubernetes objects live.

Two implementations: :class:`hami_core.cluster.memory.MemoryCluster` (in-process, no Kubernetes) and
:class:`hami_core.cluster.kube.KubeCluster` (the official ``kubernetes`` client). Objects are plain
Kubernetes JSON dicts. Patches are JSON merge patches (``application/merge-patch+json``); a key set to
``None`` is deleted. A patch that carries ``metadata.resourceVersion`` is a compare-and-swap: it fails
with :class:`ConflictError` when the object changed since that version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from hami_core.plugins.errors import PermanentError, TemporaryError

#: Watch callback: ``(event_type, object)`` with event_type ``ADDED``, ``MODIFIED`` or ``DELETED``.
WatchHandler = Callable[[str, dict[str, Any]], None]


class NotFoundError(PermanentError):
    """The object does not exist (HTTP 404)."""


class ConflictError(TemporaryError):
    """The object changed since the resourceVersion the write was based on (HTTP 409); re-read and retry."""


class Cluster(Protocol):
    """What the extender, the webhook and the registration loop need from a cluster."""

    def get_node(self, name: str) -> dict[str, Any]:
        """The Node; raises :class:`NotFoundError`."""
        ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The Pod; raises :class:`NotFoundError`."""
        ...

    def list_nodes(self) -> list[dict[str, Any]]:
        ...

    def list_pods(self) -> list[dict[str, Any]]:
        ...

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Pods bound to ``node`` (``spec.nodeName``), read fresh from the store (not a watch cache)."""
        ...

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch a Node; with ``metadata.resourceVersion`` in the patch, a CAS (:class:`ConflictError`)."""
        ...

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch a Pod (annotations, labels); raises :class:`NotFoundError`."""
        ...

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        """Create the ``pods/binding`` subresource: the pod gets ``spec.nodeName`` and ``annotations`` (the API
        server merges a Binding's annotations into the pod's, in the same write)."""
        ...

    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event about ``obj`` (``Normal`` or ``Warning``); never raises."""
        ...

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete a Pod (its own grace period), only if it still has ``uid`` (a precondition: a pod re-created under
        the same name is left alone, :class:`ConflictError`); raises :class:`NotFoundError`. Preemption's eviction."""
        ...

    def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch a Pod's ``status`` subresource (``status.nominatedNodeName``); raises :class:`NotFoundError`."""
        ...

    def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget (policy/v1) in every namespace: preemption counts the ones a victim breaks."""
        ...

    def watch(self, on_node: WatchHandler, on_pod: WatchHandler) -> None:
        """Deliver every current Node and Pod as ``ADDED``, then changes as they happen, until :meth:`close`."""
        ...

    def list_resource_quotas(self) -> list[dict[str, Any]]:
        """Every ResourceQuota in every namespace (spec §11)."""
        ...

    def watch_resource_quotas(self, on_quota: WatchHandler) -> None:
        """Deliver every current ResourceQuota as ``ADDED``, then changes as they happen, until :meth:`close`.

        Optional for a cluster: without it the scheduler enforces no quota (and says so at start).
        """
        ...

    def close(self) -> None:
        ...

    # --- DRA (issue 30): the kubelet plugin reads a claim's allocation before it prepares the claim's devices.
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim (resource.k8s.io/v1); raises :class:`NotFoundError`."""
        ...

    # --- DRA publishing (issue 30): ResourceSlices and DeviceClasses (resource.k8s.io/v1), cluster-scoped.
    def list_resource_slices(self, node: str | None = None, driver: str | None = None) -> list[dict[str, Any]]:
        """ResourceSlices, only ``node``'s (``spec.nodeName``) and ``driver``'s (``spec.driver``) when given."""
        ...

    def create_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceSlice; :class:`ConflictError` when one of that name exists."""
        ...

    def update_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice; with ``metadata.resourceVersion`` a compare-and-swap (:class:`ConflictError`);
        :class:`NotFoundError` when it does not exist."""
        ...

    def delete_resource_slice(self, name: str) -> None:
        """Delete a ResourceSlice; raises :class:`NotFoundError`."""
        ...

    def list_device_classes(self) -> list[dict[str, Any]]:
        """Every DeviceClass."""
        ...

    def create_device_class(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a DeviceClass; :class:`ConflictError` when one of that name exists."""
        ...

    def update_device_class(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a DeviceClass (compare-and-swap with ``metadata.resourceVersion``)."""
        ...

    def delete_device_class(self, name: str) -> None:
        """Delete a DeviceClass; raises :class:`NotFoundError`."""
        ...

    # --- DRA translating webhook (issue 30): the Namespace's mode label and the pods' ResourceClaimTemplates.
    def get_namespace(self, name: str) -> dict[str, Any]:
        """The Namespace; raises :class:`NotFoundError`."""
        ...

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaimTemplate (resource.k8s.io/v1); raises :class:`NotFoundError`."""
        ...

    def create_resource_claim_template(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceClaimTemplate in ``metadata.namespace``; :class:`ConflictError` when one of that name
        exists."""
        ...

    def delete_resource_claim_template(self, namespace: str, name: str) -> None:
        """Delete a ResourceClaimTemplate; raises :class:`NotFoundError`."""
        ...
