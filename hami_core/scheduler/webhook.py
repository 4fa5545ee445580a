"""The mutating admission webhook (spec §4): ``AdmissionReview`` in, ``AdmissionReview`` out.

Both ``admission.k8s.io/v1`` and ``v1beta1`` are accepted and answered in the same version. The mutation
is an RFC 6902 JSON Patch, base64-encoded, computed as the difference between the raw incoming pod and
:meth:`Engine.admit`'s result. :meth:`Engine.admit` also makes HAMi's ResourceQuota pre-check (§11.3): a pod whose
request alone exceeds its namespace's quota is denied (403, reason ``Forbidden``) with "exceeding resource quota".

Allocation identity (HAMi PRs #3042, #3074): the scheduler-owned annotations (:mod:`hami_core.wire.owned`) decide
which devices the device plugin hands a container, so a pod CREATE carrying any of them is denied whoever sends
it and whatever its schedulerName or ``hami.io/webhook`` label, and an UPDATE (of the pod or its ``status``
subresource) that adds, changes or removes one is allowed only from a trusted identity
(:class:`~hami_core.scheduler.identity.TrustedIdentities`, judged on ``request.userInfo``). An UPDATE is never
mutated: it is allowed as sent or denied.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from hami_core.engine.facade import Engine
from hami_core.engine.pods import metadata, pod_ref, pod_shape_error
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed, HamiError
from hami_core.scheduler.extender import BadRequest
from hami_core.scheduler.identity import TrustedIdentities
from hami_core.scheduler.reqmetrics import RequestMetrics
from hami_core.wire import keys
from hami_core.wire.owned import changed_owned, first_owned, owned_annotations

__all__ = ["DraAdmitter", "Webhook", "json_patch", "pointer"]

log = logging.getLogger("hami.scheduler.webhook")

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
#: The engine's quota denial (HAMi's text), counted as ``reason="quota"``.
QUOTA_MESSAGE = "exceeding resource quota"


def pointer(parts: list[str | int]) -> str:
    """A JSON pointer (RFC 6901) for ``parts``: ``~`` → ``~0``, ``/`` → ``~1``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _same(a: Any, b: Any) -> bool:
    # 1 == True in Python; JSON distinguishes them.
    return type(a) is type(b) and a == b


def json_patch(old: Any, new: Any, path: list[str | int] | None = None) -> list[dict[str, Any]]:
    """RFC 6902 operations (``add``/``replace``/``remove``) turning ``old`` into ``new``.

    Objects are diffed key by key, lists element by element when only their tails differ in length
    (appends are ``add`` at the end index, truncations ``remove`` from the end), otherwise replaced.
    """
    path = path or []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": pointer([*path, key])})
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": pointer([*path, key]), "value": value})
            elif not _deep_same(old[key], value):
                ops.extend(json_patch(old[key], value, [*path, key]))
        return ops
    if isinstance(old, list) and isinstance(new, list):
        common = min(len(old), len(new))
        if len(old) != len(new) and not all(_deep_same(old[i], new[i]) for i in range(common)):
            return [{"op": "replace", "path": pointer(path), "value": new}]
        ops = []
        for i in range(common):
            if not _deep_same(old[i], new[i]):
                ops.extend(json_patch(old[i], new[i], [*path, i]))
        ops.extend({"op": "add", "path": pointer([*path, i]), "value": new[i]} for i in range(common, len(new)))
        ops.extend({"op": "remove", "path": pointer([*path, i])} for i in range(len(old) - 1, common - 1, -1))
        return ops
    if _deep_same(old, new):
        return []
    return [{"op": "replace", "path": pointer(path), "value": new}]


def _deep_same(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_deep_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_deep_same(x, y) for x, y in zip(a, b, strict=True))
    return _same(a, b)


def _forbidden(message: str) -> dict[str, Any]:
    return {"allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": message}}


def _bad(message: str) -> dict[str, Any]:
    return {"allowed": False, "status": {"code": 400, "message": message}}


def _annotations(obj: Any, field: str) -> Mapping[str, Any] | str:
    """``obj``'s ``metadata.annotations`` (``{}`` when absent), or the message of a 400 naming ``field``."""
    if not isinstance(obj, Mapping):
        return f"{field} is not a Pod object"
    meta = obj.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        return f"{field}.metadata must be an object, got {type(meta).__name__}"
    annos = meta.get("annotations")
    if annos is None:
        return {}
    if not isinstance(annos, Mapping):
        return f"{field}.metadata.annotations must be an object, got {type(annos).__name__}"
    return annos


def _ref(pod: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """``namespace/name`` of the reviewed pod; a CREATE with ``generateName`` has no name yet."""
    meta = metadata(pod)
    namespace = meta.get("namespace") or request.get("namespace") or "default"
    name = meta.get("name") or request.get("name")
    if not name:
        name = f"{meta['generateName']}*" if isinstance(meta.get("generateName"), str) else "<unnamed>"
    return f"{namespace}/{name}"


def _username(request: Mapping[str, Any]) -> str:
    info = request.get("userInfo")
    name = info.get("username") if isinstance(info, Mapping) else None
    return name if isinstance(name, str) and name else "<no userInfo>"


class DraAdmitter(Protocol):
    """The DRA step of a CREATE (issue 30, :class:`hami_core.dra.mode.DraAdmission`): ``None`` leaves the pod to
    the device-plugin path, else the JSON patch that turns its HAMi requests into a ResourceClaim."""

    def admit(self, pod: Mapping[str, Any], namespace: str, *, dry_run: bool = False,
              lock: Any = None) -> list[dict[str, Any]] | None:
        ...


class Webhook:
    """Admits pods through :meth:`Engine.admit` (the engine lock is shared with the extender) and guards the
    scheduler-owned annotations of every pod.

    :param trusted: who may change scheduler-owned annotations on UPDATE (default: deploy/'s ServiceAccounts of
        the scheduler and the device plugin, :func:`~hami_core.scheduler.identity.default_users`).
    """

    def __init__(self, engine: Engine, *, engine_lock: threading.RLock | None = None,
                 trusted: TrustedIdentities | None = None, dra: DraAdmitter | None = None) -> None:
        self.engine = engine
        #: DRA mode (issue 30): pods of DRA-mode namespaces (or all, --device-mode dra) are translated to claims
        self.dra = dra
        self.lock = engine_lock if engine_lock is not None else threading.RLock()
        self.trusted = trusted if trusted is not None else TrustedIdentities.of()
        #: every key only hami's components may write, from the engine's backends (a new vendor is covered)
        self.owned: tuple[str, ...] = owned_annotations(engine.backends.values())
        log.info("webhook: %d scheduler-owned annotation keys may be changed only by %s", len(self.owned),
                 self.trusted.describe())
        #: what reviews answered (the scheduler app shares one with its extender and serves it on /metrics)
        self.metrics = RequestMetrics()

    def review(self, body: Any) -> dict[str, Any]:
        """Answer one ``AdmissionReview``; raises :class:`BadRequest` when it is not one. Counted and timed in
        :attr:`metrics` by operation and reason (:data:`~.reqmetrics.WEBHOOK_REASONS`)."""
        started = time.perf_counter()
        operation: Any = None
        reason = "exception"
        try:
            request = body.get("request") if isinstance(body, Mapping) else None
            operation = request.get("operation", "CREATE") if isinstance(request, Mapping) else None
            result, reason = self._review(body)
            return result
        except BadRequest:
            reason = "bad_request"
            raise
        finally:
            self.metrics.reviewed(operation, reason, time.perf_counter() - started)

    def _review(self, body: Any) -> tuple[dict[str, Any], str]:
        if not isinstance(body, Mapping):
            raise BadRequest("AdmissionReview must be a JSON object")
        version = body.get("apiVersion")
        if version not in VERSIONS:
            raise BadRequest(f"unsupported AdmissionReview apiVersion {version!r}; expected one of "
                             f"{', '.join(VERSIONS)}")
        request = body.get("request")
        if not isinstance(request, Mapping):
            raise BadRequest("AdmissionReview has no request object")
        uid = request.get("uid")
        if not isinstance(uid, str) or not uid:
            raise BadRequest("AdmissionReview request.uid is missing")
        response, reason = self._respond(request)
        response["uid"] = uid
        return {"apiVersion": version, "kind": "AdmissionReview", "response": response}, reason

    def _respond(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        # kube-apiserver always sends the operation; a hand-made review without one is judged as a CREATE
        operation = request.get("operation", "CREATE")
        if operation == "UPDATE":
            return self._update(request)
        if operation != "CREATE":
            if not isinstance(operation, str):
                return _bad(f"request.operation must be a string, got {type(operation).__name__}"), "bad_request"
            # not registered for it (deploy/ sends CREATE and UPDATE): nothing of ours to judge
            return {"allowed": True, "status": {"code": 200}}, "other_operation"
        return self._create(request)

    def _create(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        pod = request.get("object")
        if not isinstance(pod, Mapping):
            return _bad("request.object is not a Pod object"), "bad_request"
        shape = pod_shape_error(pod)
        if shape is not None:
            return _bad(f"request.object {pod_ref(pod)}: {shape}"), "bad_request"
        # Before the opt-out label and the schedulerName: a pod taking either path would keep an allocation it
        # wrote itself, and the device plugin would serve it as if the scheduler had decided it.
        owned = first_owned(metadata(pod).get("annotations") or {}, self.owned)
        if owned is not None:
            ref = _ref(pod, request)
            log.warning("denied CREATE of pod %s by %s: it carries the scheduler-owned annotation %s", ref,
                        _username(request), owned)
            return _forbidden(f"pod {ref}: annotation {owned} is written by the HAMi scheduler and cannot be set "
                              "when creating a pod"), "owned_annotation"
        labels = metadata(pod).get("labels") or {}
        if isinstance(labels, Mapping) and labels.get(keys.WEBHOOK_LABEL) == keys.WEBHOOK_IGNORE:
            return {"allowed": True, "status": {"code": 200}}, "opted_out"
        if self.dra is not None:
            translated = self._dra(pod, request)
            if translated is not None:
                return translated
        try:
            namespace = request.get("namespace")
            with self.lock:
                admitted = self.engine.admit(pod, namespace=namespace if isinstance(namespace, str) else None)
        except AdmissionDenied as exc:
            # HAMi's quota message, word for word (the engine's QuotaCheck): the one denial an operator sizes for
            reason = "quota" if str(exc) == QUOTA_MESSAGE else "policy"
            return {"allowed": False, "status": {"code": exc.code, "reason": "Forbidden", "message": str(exc)}}, reason
        except AdmissionFailed as exc:
            return {"allowed": False, "status": {"code": exc.code, "message": str(exc)}}, "invalid_request"
        except HamiError as exc:
            return {"allowed": False, "status": {"code": 500, "message": str(exc)}}, "exception"
        ops = json_patch(pod, admitted)
        out: dict[str, Any] = {"allowed": True, "status": {"code": 200}}
        if ops:
            out["patchType"] = "JSONPatch"
            out["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
        log.debug("admitted %s/%s with %d patch operation(s)", metadata(pod).get("namespace"),
                  metadata(pod).get("name"), len(ops))
        return out, "mutated" if ops else "unchanged"

    def _dra(self, pod: Mapping[str, Any], request: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
        """The DRA translation of a CREATE (``None``: not in DRA mode, or no HAMi request): the pod keeps its
        schedulerName (kube-scheduler allocates the claim); a dry-run review creates no template."""
        assert self.dra is not None
        namespace = metadata(pod).get("namespace") or request.get("namespace") or "default"
        try:
            ops = self.dra.admit(pod, str(namespace), dry_run=request.get("dryRun") is True, lock=self.lock)
        except HamiError as exc:
            log.warning("denied CREATE of pod %s: %s", _ref(pod, request), exc)
            return _bad(str(exc)), "invalid_request"
        if ops is None:
            return None
        out: dict[str, Any] = {"allowed": True, "status": {"code": 200}, "patchType": "JSONPatch",
                               "patch": base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()}
        return out, "mutated"

    def _update(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """Allow as sent, or deny: an UPDATE is never patched (the pod already exists; its spec is not ours to
        default again). No engine state is read, so the engine lock is not taken."""
        new = _annotations(request.get("object"), "request.object")
        if isinstance(new, str):
            return _bad(new), "bad_request"
        old = _annotations(request.get("oldObject"), "request.oldObject")
        if isinstance(old, str):
            return _bad(f"{old} (an UPDATE review carries the pod before the change)"), "bad_request"
        key = changed_owned(old, new, self.owned)
        if key is None:
            return {"allowed": True, "status": {"code": 200}}, "unchanged"
        pod: Mapping[str, Any] = request["object"]
        ref = _ref(pod, request)
        if self.trusted.trusts(request.get("userInfo")):
            log.debug("allowed UPDATE of %s on pod %s by %s", key, ref, _username(request))
            return {"allowed": True, "status": {"code": 200}}, "trusted_update"
        user = _username(request)
        sub = request.get("subResource")
        what = f"UPDATE of pods/{sub}" if isinstance(sub, str) and sub else "UPDATE"
        log.warning("denied %s of pod %s by %s: it changes the scheduler-owned annotation %s (trusted: %s)",
                    what, ref, user, key, self.trusted.describe())
        return _forbidden(f"pod {ref}: annotation {key} is written by the HAMi scheduler and device plugin and "
                          f"cannot be changed by {user} (only the identities of hami scheduler "
                          "--trusted-identities may)"), "owned_annotation"
