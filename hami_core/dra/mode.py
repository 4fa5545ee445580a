"""DRA mode: which pods the webhook translates (per namespace or per cluster), the template it creates, and which
nodes ``hami dra-driver`` publishes for (one mode per node).

Per cluster: ``hami scheduler --device-mode dra`` translates every pod that asks HAMi devices. Per namespace (the
default ``--device-mode device-plugin``): pods of a Namespace labelled ``hami.io/device-mode: dra`` are translated,
the label read through the cluster API and cached for :data:`NAMESPACE_TTL_S` seconds (a relabelled namespace
takes effect within that). A translated pod keeps its schedulerName: no extender is involved, kube-scheduler
allocates its claim, which kube-controller-manager's resourceclaim controller instantiates from the template.

The node side (the label on the Node) is :mod:`hami_core.cluster.devicemode`, re-exported here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hami_core.cluster.base import ConflictError, NotFoundError
from hami_core.cluster.devicemode import (
    DEVICE_PLUGIN,
    DRA,
    MODE_LABEL,
    REFUSED_REASON,
    device_plugin_refusal,
    extender_refusal,
    node_mode,
    refuse,
)
from hami_core.dra.translate import TranslateError, Translation, translate
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import DeviceBackend

__all__ = [
    "DEVICE_PLUGIN",
    "DRA",
    "MODES",
    "MODE_LABEL",
    "NAMESPACE_TTL_S",
    "REFUSED_REASON",
    "DraAdmission",
    "NamespaceModes",
    "check_dra_node",
    "device_plugin_refusal",
    "dra_driver_refusal",
    "ensure_template",
    "extender_refusal",
    "node_mode",
    "refuse",
]

log = logging.getLogger("hami.dra.mode")

MODES = (DEVICE_PLUGIN, DRA)
#: How long a namespace's label is trusted before it is read again.
NAMESPACE_TTL_S = 30.0
#: Namespaces remembered at most (the oldest are forgotten first).
MAX_CACHED = 10000


def dra_driver_refusal(node: Mapping[str, Any], backends: Iterable[DeviceBackend]) -> str | None:
    """Why ``hami dra-driver`` must not publish for ``node`` (``None``: it may): the node is not labelled DRA, or
    it carries a backend's device-plugin registration annotation (the device plugin serves it too)."""
    meta = node.get("metadata") or {}
    name = meta.get("name") or "<unnamed>"
    if node_mode(node) != DRA:
        return (f"node {name} is not in DRA mode: label it {MODE_LABEL}={DRA} to publish its devices as "
                "ResourceSlices (and stop hami device-plugin there)")
    annotations = meta.get("annotations") or {}
    for backend in backends:
        key = backend.register_annotation
        if key and annotations.get(key):
            return (f"node {name} is labelled {MODE_LABEL}={DRA} but carries {backend.name}'s device-plugin "
                    f"registration annotation {key}: it is configured for both modes; stop hami device-plugin "
                    "there and remove the annotation")
    return None


def check_dra_node(cluster: Any, node_name: str, backends: Iterable[DeviceBackend], *,
                   from_registration: bool = False) -> None:
    """Refuse to start ``hami dra-driver`` for a node :func:`dra_driver_refusal` refuses: a Warning event on the
    Node, a log line and a :class:`~hami_core.plugins.errors.HamiError` (the command exits). ``from_registration``
    (``--from-registration``: publish what the registration annotation says, for fake clusters) leaves the
    annotation check out, since the annotation is then the driver's own source, not the device plugin's."""
    try:
        node = cluster.get_node(node_name)
    except NotFoundError:
        raise HamiError(f"node {node_name} not found: the DRA driver publishes for an existing Node") from None
    message = dra_driver_refusal(node, [] if from_registration else backends)
    if message is not None:
        refuse(cluster, node, "hami dra-driver", message)
        raise HamiError(message)


class NamespaceModes:
    """The mode of each namespace: ``cluster_mode`` when it is :data:`DRA`, else the Namespace's label, read with
    ``get_namespace`` and cached for ``ttl_s``. A namespace that cannot be read is in device-plugin mode (logged):
    the webhook then behaves as it always has."""

    def __init__(self, cluster: Any, cluster_mode: str = DEVICE_PLUGIN, *, ttl_s: float = NAMESPACE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if cluster_mode not in MODES:
            raise ValueError(f"--device-mode {cluster_mode!r}: expected one of {', '.join(MODES)}")
        self.cluster = cluster
        self.cluster_mode = cluster_mode
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def mode(self, namespace: str) -> str:
        if self.cluster_mode == DRA:
            return DRA
        now = self.clock()
        with self._lock:
            hit = self._cache.get(namespace)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            labels = (self.cluster.get_namespace(namespace).get("metadata") or {}).get("labels") or {}
            mode = DRA if labels.get(MODE_LABEL) == DRA else DEVICE_PLUGIN
        except NotFoundError:  # the in-memory cluster of tests and simulations has no Namespace objects
            mode = DEVICE_PLUGIN
        except Exception as exc:  # an unreadable namespace (no RBAC to get it) must not block admission
            log.warning("namespace %s: cannot read its %s label (%s); treating it as %s", namespace, MODE_LABEL,
                        exc, DEVICE_PLUGIN)
            mode = DEVICE_PLUGIN
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.pop(next(iter(self._cache)))
            self._cache[namespace] = (now, mode)
        return mode


def ensure_template(cluster: Any, translation: Translation, *, dry_run: bool = False) -> str:
    """Make sure the translation's ResourceClaimTemplate exists; returns ``created``, ``reused`` or ``dry-run``.
    An existing template of that name with another spec is a :class:`TranslateError` naming it (the name carries
    a digest of the spec, so only a hand-made object clashes). A dry run reads nothing and creates nothing."""
    if dry_run:
        return "dry-run"
    namespace, name = translation.namespace, translation.name
    for _ in range(2):
        try:
            existing = cluster.get_resource_claim_template(namespace, name)
        except NotFoundError:
            try:
                cluster.create_resource_claim_template(translation.template)
                return "created"
            except ConflictError:
                continue  # a concurrent admission created it: compare with that one
        if existing.get("spec") == translation.template["spec"]:
            return "reused"
        raise TranslateError(f"ResourceClaimTemplate {namespace}/{name} exists with a different spec; delete it or "
                             "rename the pod")
    raise TranslateError(f"ResourceClaimTemplate {namespace}/{name}: created and gone again; retry the admission")


class DraAdmission:
    """The webhook's DRA step: :meth:`admit` answers ``None`` for a pod not to translate (device-plugin mode, or no
    HAMi request), else the JSON patch, after creating (or reusing) the pod's template."""

    def __init__(self, engine: Any, cluster: Any, cluster_mode: str = DEVICE_PLUGIN, *,
                 modes: NamespaceModes | None = None) -> None:
        self.engine = engine
        self.cluster = cluster
        self.modes = modes if modes is not None else NamespaceModes(cluster, cluster_mode)

    def admit(self, pod: Mapping[str, Any], namespace: str, *, dry_run: bool = False,
              lock: Any = None) -> list[dict[str, Any]] | None:
        """Raises :class:`TranslateError` (a 400 to the webhook) for what DRA cannot express or a clashing
        template; other :class:`~hami_core.plugins.errors.HamiError` from the cluster."""
        if lock is not None:
            with lock:
                requests = self.engine.requests(pod)
        else:
            requests = self.engine.requests(pod)
        # the namespace is read only for a pod that asks HAMi devices
        if requests.empty or self.modes.mode(namespace) != DRA:
            return None
        translation = translate(pod, requests, self.engine.backends, namespace=namespace)
        if translation is None:
            return None
        how = ensure_template(self.cluster, translation, dry_run=dry_run)
        log.info("namespace %s: pod %s translated to DRA (ResourceClaimTemplate %s, %s)", namespace,
                 (pod.get("metadata") or {}).get("name") or (pod.get("metadata") or {}).get("generateName"),
                 translation.name, how)
        return translation.patch
