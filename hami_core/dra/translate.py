"""The translating webhook's pure half: a pod's HAMi requests → one ResourceClaimTemplate and the pod's JSON patch.

HAMi-DRA's idea with hami-py's resource names: a pod that asks ``nvidia.com/gpu`` / ``gpumem`` / ``gpucores`` (or a
vendor's equivalents) in DRA mode gets one ResourceClaimTemplate (resource.k8s.io/v1) with one request per
container and backend, and its extended resources replaced by a claim, so unmodified HAMi workloads run under
kube-scheduler's own DRA allocator. kube-controller-manager's resourceclaim controller instantiates the template
into a ResourceClaim per pod (named after the pod) when the pod is created; nothing here creates claims.

What maps to what, per container and backend (:class:`~hami_core.plugins.types.DeviceRequest`, as parsed by
``Engine.requests``, so every vendor's defaults and rules apply exactly as in device-plugin mode):

* ``nums`` → ``exactly.count`` (``allocationMode: ExactCount``), from the backend's DeviceClass
  (:func:`~hami_core.dra.model.device_class_name`);
* ``memreq`` MiB → ``capacity.requests.memory: "<memreq>Mi"`` (per device, as HAMi books it);
* ``coresreq`` % → ``capacity.requests.cores: "<n>"`` (0 included: the parsed request already holds the backend's
  default cores, so the claim consumes what HAMi would book);
* a whole-card request (``coresreq`` 100, or no memory in MiB with the percentage 100 or unset: what HAMi books as
  the card's whole memory) names **no memory**: the claim then consumes the memory capacity's
  ``requestPolicy.default``, which :func:`~hami_core.plugins.standard.standard_dra_devices` publishes as the card's
  whole memory. Consuming all of it is what makes the card exclusive: every other claim consumes at least the
  policy's ``validRange.min`` (1 MiB), so none fits beside it, as HAMi fits nothing beside a 100-core or 100%-memory
  booking. An absolute amount could not say this (the webhook does not know which card the allocator picks), and
  a CEL selector cannot make a claim consume anything. Exception, documented: NVIDIA with ``defaultMemory`` set
  publishes that as the default, so there a whole-card request consumes ``defaultMemory`` (and a request naming no
  memory books ``defaultMemory`` in HAMi too: the parsed request then carries it in MiB).
* ``gpumem-percentage`` below 100 with no memory in MiB is **refused** (:class:`TranslateError`): a percentage of
  a card not yet chosen has no absolute amount, and DRA capacity requests are absolute; a CEL selector per card
  size would bind the claim to card models the webhook cannot know. Ask the memory resource in MiB instead.
* negative cores (NVIDIA ``negativeCores: keep``) and cores above 100 are refused.

Names (deterministic, bounded): the template is ``<pod name or generateName>-hami-<digest>`` (a DNS subdomain of at
most 253 characters; the digest hashes the template's spec, so a retried admission, or another pod of the same
ReplicaSet, reuses the identical template; a generateName pod has no name at admission and needs none), the pod's
claim is :data:`CLAIM_NAME` (a DNS label), each request ``<container>-<word>`` (a DNS label of at most 63
characters, cut and hashed when longer; ``<word>`` is ``gpu`` for NVIDIA, the backend's word otherwise).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.dra.model import device_class_name, device_name
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, ContainerRequests, DeviceBackend, DeviceRequest

__all__ = [
    "API_VERSION",
    "CLAIM_NAME",
    "KIND",
    "TEMPLATE_LABEL",
    "TranslateError",
    "Translation",
    "claim_requests",
    "pod_patch",
    "request_name",
    "template_name",
    "translate",
]

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceClaimTemplate"
#: The pod's claim (``spec.resourceClaims[].name``, a DNS label).
CLAIM_NAME = "hami-devices"
#: Label on every template the webhook creates (value ``webhook``), so an operator can list them.
TEMPLATE_LABEL = "dra.project-hami.io/translated"
MAX_LABEL = 63
#: ``DeviceRequestsMaxSize`` and ``AllocationResultsMaxSize`` of resource.k8s.io/v1: requests of one claim, and
#: devices allocated to it in all.
MAX_REQUESTS = 32
MAX_RESULTS = 32
MAX_SUBDOMAIN = 253
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


class TranslateError(HamiError):
    """The pod's HAMi requests cannot be expressed as a ResourceClaim; the message names the pod, container and
    resource."""


@dataclass(frozen=True)
class Translation:
    """One pod's translation: the ``template`` to create in ``namespace`` and the RFC 6902 ``patch`` of the pod."""

    namespace: str
    template: dict[str, Any]
    patch: list[dict[str, Any]]

    @property
    def name(self) -> str:
        return str(self.template["metadata"]["name"])


def _digest(text: str, size: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def _label(text: str) -> str:
    """``text`` as a DNS label of at most 63 characters: lower-cased, other characters as ``-``, cut and given a
    hash of the original when too long (so two long names stay apart)."""
    word = _NOT_LABEL.sub("-", text.lower()).strip("-") or "x"
    if len(word) <= MAX_LABEL:
        return word
    return f"{word[:MAX_LABEL - 11].rstrip('-')}-{_digest(text)}"


def request_name(container: str, backend: str) -> str:
    """A claim request's name for ``container``'s request of ``backend``: ``<container>-<word>``, a DNS label."""
    word = device_name(backend, 0).rpartition("-")[0]
    return _label(f"{container}-{word}")


def template_name(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """``<pod name or generateName>-hami-<digest of spec>``, a DNS subdomain of at most 253 characters."""
    meta = pod.get("metadata") or {}
    base = str(meta.get("name") or meta.get("generateName") or "pod").rstrip("-.")
    base = _NOT_LABEL.sub("-", base.lower()).strip("-") or "pod"
    suffix = f"-hami-{_digest(json.dumps(spec, sort_keys=True, separators=(',', ':')))}"
    return base[:MAX_SUBDOMAIN - len(suffix)].rstrip("-") + suffix


def _capacity(ref: str, container: str, backend: DeviceBackend, req: DeviceRequest) -> dict[str, str]:
    names = backend.resource_names
    if req.coresreq < 0 or req.coresreq > 100:
        raise TranslateError(f"pod {ref}: container {container}: {names.cores or 'cores'} {req.coresreq} cannot be "
                             "translated to DRA: cores must be 0..100 (percent of one card)")
    out = {"cores": str(req.coresreq)}
    whole = req.coresreq == 100 or (req.memreq == 0 and req.mem_percentage in (100, MEM_PERCENTAGE_UNSET))
    if whole:
        return out  # no memory: the published default is the whole card (see the module docstring)
    if req.memreq > 0:
        out["memory"] = f"{req.memreq}Mi"
        return out
    raise TranslateError(f"pod {ref}: container {container}: {names.memory_percentage or 'memory percentage'} "
                         f"{req.mem_percentage}% cannot be translated to DRA: a percentage of a card not yet chosen "
                         f"has no absolute amount; ask {names.memory or 'the memory resource'} in MiB instead")


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(field, index, container) of the pod in the engine's order: init containers first."""
    spec = pod.get("spec") or {}
    out: list[tuple[str, int, Mapping[str, Any]]] = []
    for key in ("initContainers", "containers"):
        out.extend((key, i, c) for i, c in enumerate(spec.get(key) or []))
    return out


def claim_requests(ref: str, pod: Mapping[str, Any], requests: ContainerRequests,
                   backends: Mapping[str, DeviceBackend]) -> list[tuple[int, str, dict[str, Any]]]:
    """(container position, request name, ``devices.requests[]`` entry) for every container and backend."""
    containers = _containers(pod)
    if len(containers) < len(requests.containers):
        raise TranslateError(f"pod {ref}: {len(requests.containers)} containers requested devices but the pod has "
                             f"{len(containers)}")
    out = []
    seen: set[str] = set()
    for position, by_backend in enumerate(requests.containers):
        container = str(containers[position][2].get("name") or f"c{position}")
        for name in sorted(by_backend):
            req, backend = by_backend[name], backends.get(name)
            if backend is None:
                raise TranslateError(f"pod {ref}: container {container}: backend {name} is not loaded")
            rname = request_name(container, name)
            if rname in seen:
                rname = _label(f"c{position}-{rname}")
            seen.add(rname)
            exactly = {"deviceClassName": device_class_name(name), "allocationMode": "ExactCount",
                       "count": req.nums, "capacity": {"requests": _capacity(ref, container, backend, req)}}
            out.append((position, rname, {"name": rname, "exactly": exactly}))
    return out


def _pointer(parts: Sequence[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def pod_patch(pod: Mapping[str, Any], template: str, entries: Sequence[tuple[int, str, Mapping[str, Any]]],
              backends: Mapping[str, DeviceBackend], requested: ContainerRequests) -> list[dict[str, Any]]:
    """The JSON patch: each requesting container loses the HAMi resources of the backends it asks (limits and
    requests) and gains ``resources.claims`` entries; the pod gains ``spec.resourceClaims`` naming ``template``."""
    ops: list[dict[str, Any]] = []
    containers = _containers(pod)
    by_position: dict[int, list[str]] = {}
    for position, rname, _ in entries:
        by_position.setdefault(position, []).append(rname)
    for position, names in sorted(by_position.items()):
        key, index, container = containers[position]
        resources = container.get("resources") or {}
        drop = {n for b in requested.containers[position] for n in backends[b].resource_names.all()}
        for section in ("limits", "requests"):
            values = resources.get(section) or {}
            for res in sorted(n for n in values if n in drop):
                ops.append({"op": "remove", "path": _pointer(["spec", key, index, "resources", section, res])})
        claims = [{"name": CLAIM_NAME, "request": n} for n in names]
        if "resources" not in container:
            ops.append({"op": "add", "path": _pointer(["spec", key, index, "resources"]), "value": {"claims": claims}})
        elif "claims" not in resources:
            ops.append({"op": "add", "path": _pointer(["spec", key, index, "resources", "claims"]), "value": claims})
        else:
            ops.extend({"op": "add", "path": _pointer(["spec", key, index, "resources", "claims", "-"]), "value": c}
                       for c in claims)
    entry = {"name": CLAIM_NAME, "resourceClaimTemplateName": template}
    if "resourceClaims" in (pod.get("spec") or {}):
        ops.append({"op": "add", "path": "/spec/resourceClaims/-", "value": entry})
    else:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": [entry]})
    return ops


def translate(pod: Mapping[str, Any], requests: ContainerRequests, backends: Mapping[str, DeviceBackend], *,
              namespace: str) -> Translation | None:
    """The template and patch for ``pod`` (``None`` when it asks no HAMi device). Raises :class:`TranslateError`
    naming the pod, container and resource for what DRA cannot express, and for a pod that already has a claim
    named :data:`CLAIM_NAME`."""
    if requests.empty:
        return None
    meta = pod.get("metadata") or {}
    ref = f"{namespace}/{meta.get('name') or str(meta.get('generateName') or '') + '*'}"
    for claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if isinstance(claim, Mapping) and claim.get("name") == CLAIM_NAME:
            raise TranslateError(f"pod {ref}: spec.resourceClaims already has a claim named {CLAIM_NAME}")
    entries = claim_requests(ref, pod, requests, backends)
    devices = sum(e["exactly"]["count"] for _, _, e in entries)
    if len(entries) > MAX_REQUESTS or devices > MAX_RESULTS:
        raise TranslateError(f"pod {ref}: {len(entries)} device requests for {devices} devices cannot be translated "
                             f"to DRA: one ResourceClaim holds at most {MAX_REQUESTS} requests and {MAX_RESULTS} "
                             "devices")
    spec = {"spec": {"devices": {"requests": [e for _, _, e in entries]}}}
    name = template_name(pod, spec)
    template = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": name, "namespace": namespace, "labels": {TEMPLATE_LABEL: "webhook"}},
                "spec": spec}
    return Translation(namespace, template, pod_patch(pod, name, entries, backends, requests))
