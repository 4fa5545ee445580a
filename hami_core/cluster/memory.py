"""An in-process cluster: Nodes, Pods, ResourceQuotas and Events in memory, behind the
:class:`~hami_core.cluster.base.Cluster` interface, with resourceVersions, compare-and-swap patches and watches, as
the API server has them.

``hami scheduler --cluster-file cluster.yaml`` serves the real extender and webhook on top of it with no
Kubernetes at all.
"""

from __future__ import annotations

import copy
import itertools
import marshal
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hami_core.cluster.base import ConflictError, NotFoundError, WatchHandler
from hami_core.cluster.selectors import selector_matches
from hami_core.engine.objectfile import objects_from_yaml
from hami_core.plugins.errors import HamiError
from hami_core.plugins.yamlload import MAX_INPUT_BYTES, YamlInputError, read_text


def clone(obj: Any) -> Any:
    """A deep copy of a JSON-shaped object. ``marshal`` copies dicts, lists and scalars in C, ~10x faster than
    :func:`copy.deepcopy` (every read, write and watch event copies, so callers never share the store's objects);
    anything marshal cannot copy falls back to ``deepcopy``."""
    try:
        return marshal.loads(marshal.dumps(obj))
    except ValueError:
        return copy.deepcopy(obj)


def _node_of(pod: Mapping[str, Any] | None) -> str | None:
    spec = pod.get("spec") if pod is not None else None
    return spec.get("nodeName") if isinstance(spec, Mapping) else None


def merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch, in place: ``None`` deletes a key, mappings merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = clone(value) if isinstance(value, Mapping | list) else value
    return target


class MemoryCluster:
    """A thread-safe store of Nodes, Pods and ResourceQuotas (and recorded Events) implementing ``Cluster``."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]] = (), pods: Iterable[Mapping[str, Any]] = (),
                 quotas: Iterable[Mapping[str, Any]] = ()) -> None:
        self._lock = threading.RLock()
        self._rv = itertools.count(1)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        #: spec.nodeName → keys of the pods bound there (what the API server's field-selector index gives).
        self._by_node: dict[str, set[tuple[str, str]]] = {}
        self.events: list[dict[str, Any]] = []
        self._watchers: list[tuple[WatchHandler, WatchHandler]] = []
        #: (namespace, name) → ResourceQuota
        self.quotas: dict[tuple[str, str], dict[str, Any]] = {}
        #: PodDisruptionBudgets (policy/v1), as tests add them
        self.pdbs: list[dict[str, Any]] = []
        self._quota_watchers: list[WatchHandler] = []
        for node in nodes:
            self.add_node(node)
        for pod in pods:
            self.add_pod(pod)
        for quota in quotas:
            self.add_quota(quota)

    @classmethod
    def from_file(cls, path: str | Path) -> MemoryCluster:
        """Nodes, Pods, ResourceQuotas and PodDisruptionBudgets from one YAML file (multi-document or ``kind:
        List``); objects of other kinds are ignored. A document that is not an object, an object without ``kind``,
        or one shaped unlike what the API server would store is a :class:`HamiError` naming the file, the document
        and the field (read with :mod:`hami_core.plugins.yamlload`: duplicate keys, alias bombs and huge files are
        errors)."""
        try:
            text = read_text(path, "cluster file", max_bytes=MAX_INPUT_BYTES)
            objects = objects_from_yaml(text, source=f"cluster file {path}", kinds=("Node", "Pod", "ResourceQuota"),
                                        other_kinds=True)
        except YamlInputError as exc:
            raise HamiError(str(exc)) from None
        nodes = [o for o in objects if o["kind"] == "Node"]
        pods = [o for o in objects if o["kind"] == "Pod"]
        quotas = [o for o in objects if o["kind"] == "ResourceQuota"]
        cluster = cls(nodes, pods, quotas)
        cluster.pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]  # hami defrag reads them
        return cluster

    # ------------------------------------------------------------------------------------ writes
    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        return obj

    def _notify(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        for on_node, on_pod in list(self._watchers):
            (on_node if kind == "Node" else on_pod)(event, clone(obj))

    def add_node(self, node: Mapping[str, Any]) -> dict[str, Any]:
        obj = self._stamp(clone(dict(node)))
        obj.setdefault("kind", "Node")
        with self._lock:
            event = "MODIFIED" if obj["metadata"]["name"] in self.nodes else "ADDED"
            self.nodes[obj["metadata"]["name"]] = obj
            self._notify("Node", event, obj)
        return clone(obj)

    def add_pod(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        obj = self._stamp(clone(dict(pod)))
        obj.setdefault("kind", "Pod")
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{meta['namespace']}-{meta['name']}")
        key = (meta["namespace"], meta["name"])
        with self._lock:
            event = "MODIFIED" if key in self.pods else "ADDED"
            self._reindex(key, self.pods.get(key), obj)
            self.pods[key] = obj
            self._notify("Pod", event, obj)
        return clone(obj)

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        """Delete at once (no grace period here); with ``uid``, only while the pod still has it (a precondition)."""
        with self._lock:
            current = self.pods.get((namespace, name))
            if current is None:
                raise NotFoundError(f"pods {namespace}/{name} not found")
            if uid and current["metadata"].get("uid") != uid:
                raise ConflictError(f"pod {namespace}/{name}: Precondition failed: UID in precondition: {uid}, "
                                    f"UID in object meta: {current['metadata'].get('uid')}")
            obj = self.pods.pop((namespace, name))
            self._reindex((namespace, name), obj, None)
            self._notify("Pod", "DELETED", obj)

    def evict_pod(self, namespace: str, name: str, uid: str = "") -> None:
        """The Eviction API: refused (:class:`ConflictError`) while the pod is covered by more than one
        PodDisruptionBudget or by one whose ``status.disruptionsAllowed`` is spent; otherwise that budget's
        allowance drops by one and the pod is deleted (:meth:`delete_pod`, its UID precondition included)."""
        with self._lock:
            current = self.pods.get((namespace, name))
            if current is None:
                raise NotFoundError(f"pods {namespace}/{name} not found")
            labels = current["metadata"].get("labels") or {}
            covering = [p for p in self.pdbs if (p.get("metadata") or {}).get("namespace", "default") == namespace
                        and selector_matches((p.get("spec") or {}).get("selector"), labels)]
            if len(covering) > 1:
                raise ConflictError(f"pod {namespace}/{name}: this pod has more than one PodDisruptionBudget, "
                                    "which the eviction subresource does not support")
            status = covering[0].setdefault("status", {}) if covering else None
            if status is not None and int(status.get("disruptionsAllowed") or 0) <= 0:
                raise ConflictError(f"pod {namespace}/{name}: Cannot evict pod as it would violate the pod's "
                                    "disruption budget")
            self.delete_pod(namespace, name, uid)
            if status is not None:
                status["disruptionsAllowed"] = int(status.get("disruptionsAllowed") or 0) - 1

    def add_quota(self, quota: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a ResourceQuota (namespace defaults to ``default``)."""
        obj = self._stamp(clone(dict(quota)))
        obj.setdefault("kind", "ResourceQuota")
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        key = (meta["namespace"], meta["name"])
        with self._lock:
            event = "MODIFIED" if key in self.quotas else "ADDED"
            self.quotas[key] = obj
            for on_quota in list(self._quota_watchers):
                on_quota(event, clone(obj))
        return clone(obj)

    def delete_quota(self, namespace: str, name: str) -> None:
        with self._lock:
            obj = self.quotas.pop((namespace, name), None)
            if obj is None:
                raise NotFoundError(f"resourcequotas {namespace}/{name} not found")
            for on_quota in list(self._quota_watchers):
                on_quota("DELETED", clone(obj))

    def delete_node(self, name: str) -> None:
        with self._lock:
            obj = self.nodes.pop(name, None)
            if obj is None:
                raise NotFoundError(f"nodes {name} not found")
            self._notify("Node", "DELETED", obj)

    # ------------------------------------------------------------------------------------ Cluster
    def get_node(self, name: str) -> dict[str, Any]:
        with self._lock:
            if name not in self.nodes:
                raise NotFoundError(f'nodes "{name}" not found')
            return clone(self.nodes[name])

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            if (namespace, name) not in self.pods:
                raise NotFoundError(f'pods "{name}" not found in namespace {namespace}')
            return clone(self.pods[(namespace, name)])

    def list_nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            return [clone(n) for _, n in sorted(self.nodes.items())]

    def list_pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return [clone(p) for _, p in sorted(self.pods.items())]

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        with self._lock:
            return [clone(self.pods[key]) for key in sorted(self._by_node.get(node, ()))]

    def _reindex(self, key: tuple[str, str], old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        was, now = _node_of(old), _node_of(new)
        if was == now:
            return
        if was:
            keys_there = self._by_node.get(was)
            if keys_there is not None:
                keys_there.discard(key)
                if not keys_there:
                    del self._by_node[was]
        if now:
            self._by_node.setdefault(str(now), set()).add(key)

    def _patch(self, kind: str, store: dict[Any, dict[str, Any]], key: Any, patch: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            obj = store.get(key)
            if obj is None:
                raise NotFoundError(f"{kind} {key} not found")
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
                raise ConflictError(f"Operation cannot be fulfilled on {kind} {key}: the object has been modified; "
                                    "please apply your changes to the latest version and try again")
            patch = clone(dict(patch))
            (patch.get("metadata") or {}).pop("resourceVersion", None)
            was = _node_of(obj) if kind == "Pod" else None
            merge_patch(obj, patch)
            if kind == "Pod" and _node_of(obj) != was:
                self._reindex(key, {"spec": {"nodeName": was}}, obj)
            self._stamp(obj)
            self._notify(kind, "MODIFIED", obj)
            return clone(obj)

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self._patch("Node", self.nodes, name, patch)

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self._patch("Pod", self.pods, (namespace, name), patch)

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise NotFoundError(f'pods "{name}" not found in namespace {namespace}')
            if uid and pod["metadata"].get("uid") != uid:
                raise ConflictError(f"pod {namespace}/{name}: UID {uid} does not match")
            if pod.get("spec", {}).get("nodeName"):
                raise ConflictError(f"pod {namespace}/{name} is already assigned to node "
                                    f"{pod['spec']['nodeName']}")
            patch: dict[str, Any] = {"spec": {"nodeName": node}}
            if annotations:
                patch["metadata"] = {"annotations": dict(annotations)}
            self._patch("Pod", self.pods, (namespace, name), patch)

    def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        status = patch.get("status")
        return self._patch("Pod", self.pods, (namespace, name), {"status": dict(status)} if status else {})

    def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        with self._lock:
            return [clone(p) for p in self.pdbs]

    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        with self._lock:
            self.events.append({"type": event_type, "reason": reason, "message": message,
                                "involvedObject": {"kind": obj.get("kind", "Pod"), "name": meta.get("name"),
                                                   "namespace": meta.get("namespace"), "uid": meta.get("uid")}})

    def watch(self, on_node: WatchHandler, on_pod: WatchHandler) -> None:
        with self._lock:
            for node in self.nodes.values():
                on_node("ADDED", clone(node))
            for pod in self.pods.values():
                on_pod("ADDED", clone(pod))
            self._watchers.append((on_node, on_pod))

    def list_resource_quotas(self) -> list[dict[str, Any]]:
        with self._lock:
            return [clone(q) for _, q in sorted(self.quotas.items())]

    def watch_resource_quotas(self, on_quota: WatchHandler) -> None:
        with self._lock:
            for quota in self.quotas.values():
                on_quota("ADDED", clone(quota))
            self._quota_watchers.append(on_quota)

    def close(self) -> None:
        with self._lock:
            self._watchers.clear()
            self._quota_watchers.clear()

    # --- DRA (issue 30): ResourceClaims (resource.k8s.io/v1), as tests add them; kept apart from __init__.
    def _claims(self) -> dict[tuple[str, str], dict[str, Any]]:
        claims: dict[tuple[str, str], dict[str, Any]] | None = self.__dict__.get("resource_claims")
        if claims is None:
            claims = self.__dict__.setdefault("resource_claims", {})
        return claims

    def add_resource_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        """Store (or replace) a ResourceClaim; it gets a ``resourceVersion`` and, if it has none, a ``uid``."""
        obj = clone(dict(claim))
        obj.setdefault("kind", "ResourceClaim")
        obj.setdefault("apiVersion", "resource.k8s.io/v1")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        with self._lock:
            meta.setdefault("uid", f"claim-uid-{next(self._rv)}")
            meta["resourceVersion"] = str(next(self._rv))
            self._claims()[(meta["namespace"], meta["name"])] = obj
            return clone(obj)

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        with self._lock:
            self._claims().pop((namespace, name), None)

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            claim = self._claims().get((namespace, name))
            if claim is None:
                raise NotFoundError(f'resourceclaims.resource.k8s.io "{name}" not found in namespace {namespace}')
            return clone(claim)

    # --- DRA publishing (issue 30): ResourceSlices and DeviceClasses (cluster-scoped), kept apart from __init__.
    def _dra_store(self, kind: str) -> dict[str, dict[str, Any]]:
        stores: dict[str, dict[str, dict[str, Any]]] = self.__dict__.setdefault("dra_objects", {})
        return stores.setdefault(kind, {})

    def _dra_create(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        item = clone(dict(obj))
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", "resource.k8s.io/v1")
        meta = item.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise HamiError(f"{kind} is invalid: metadata.name: Required value")
        with self._lock:
            store = self._dra_store(kind)
            if name in store:
                raise ConflictError(f'{kind} "{name}" already exists')
            meta.pop("resourceVersion", None)
            meta.setdefault("uid", f"uid-{kind.lower()}-{name}")
            meta["generation"] = 1
            store[name] = self._stamp(item)
            return clone(item)

    def _dra_update(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        item = clone(dict(obj))
        meta = item.setdefault("metadata", {})
        name = meta.get("name")
        with self._lock:
            store = self._dra_store(kind)
            old = store.get(str(name))
            if old is None:
                raise NotFoundError(f'{kind} "{name}" not found')
            wanted = meta.get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                raise ConflictError(f'Operation cannot be fulfilled on {kind} "{name}": the object has been modified')
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", "resource.k8s.io/v1")
            meta["uid"] = old["metadata"].get("uid")
            # as the API server: metadata.generation counts spec changes
            changed = item.get("spec") != old.get("spec")
            meta["generation"] = old["metadata"].get("generation", 1) + (1 if changed else 0)
            store[str(name)] = self._stamp(item)
            return clone(item)

    def _dra_delete(self, kind: str, name: str) -> None:
        with self._lock:
            if self._dra_store(kind).pop(name, None) is None:
                raise NotFoundError(f'{kind} "{name}" not found')

    def list_resource_slices(self, node: str | None = None, driver: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            items = sorted(self._dra_store("ResourceSlice").items())
            return [clone(o) for _, o in items
                    if (node is None or (o.get("spec") or {}).get("nodeName") == node)
                    and (driver is None or (o.get("spec") or {}).get("driver") == driver)]

    def create_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._dra_create("ResourceSlice", obj)

    def update_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._dra_update("ResourceSlice", obj)

    def delete_resource_slice(self, name: str) -> None:
        self._dra_delete("ResourceSlice", name)

    def list_device_classes(self) -> list[dict[str, Any]]:
        with self._lock:
            return [clone(o) for _, o in sorted(self._dra_store("DeviceClass").items())]

    def create_device_class(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._dra_create("DeviceClass", obj)

    def update_device_class(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._dra_update("DeviceClass", obj)

    def delete_device_class(self, name: str) -> None:
        self._dra_delete("DeviceClass", name)

    # --- DRA translating webhook (issue 30): Namespaces and ResourceClaimTemplates (namespaced, by (namespace, name)).
    def add_namespace(self, obj: Mapping[str, Any]) -> None:
        """Create or replace a Namespace (tests label it ``hami.io/device-mode: dra``)."""
        item = clone(dict(obj))
        item.setdefault("kind", "Namespace")
        item.setdefault("apiVersion", "v1")
        with self._lock:
            self.__dict__.setdefault("namespaces", {})[item["metadata"]["name"]] = item

    def get_namespace(self, name: str) -> dict[str, Any]:
        with self._lock:
            item = self.__dict__.get("namespaces", {}).get(name)
            if item is None:
                raise NotFoundError(f'namespaces "{name}" not found')
            return clone(item)

    def _templates(self) -> dict[tuple[str, str], dict[str, Any]]:
        store: dict[tuple[str, str], dict[str, Any]] = self.__dict__.setdefault("claim_templates", {})
        return store

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            item = self._templates().get((namespace, name))
            if item is None:
                raise NotFoundError(f'resourceclaimtemplates.resource.k8s.io "{name}" not found in {namespace}')
            return clone(item)

    def create_resource_claim_template(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        item = clone(dict(obj))
        item.setdefault("kind", "ResourceClaimTemplate")
        item.setdefault("apiVersion", "resource.k8s.io/v1")
        meta = item.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        key = (meta["namespace"], meta.get("name"))
        with self._lock:
            if key in self._templates():
                raise ConflictError(f'resourceclaimtemplates.resource.k8s.io "{key[1]}" already exists')
            meta.setdefault("uid", f"uid-resourceclaimtemplate-{key[0]}-{key[1]}")
            self._templates()[(key[0], str(key[1]))] = self._stamp(item)
            return clone(item)

    def delete_resource_claim_template(self, namespace: str, name: str) -> None:
        with self._lock:
            if self._templates().pop((namespace, name), None) is None:
                raise NotFoundError(f'resourceclaimtemplates.resource.k8s.io "{name}" not found in {namespace}')
