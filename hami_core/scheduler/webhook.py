"""The mutating admission webhook (spec §4): ``AdmissionReview`` in, ``AdmissionReview`` out.

Both ``admission.k8s.io/v1`` and ``v1beta1`` are accepted and answered in the same version. The mutation
is an RFC 6902 JSON Patch, base64-encoded, computed as the difference between the raw incoming pod and
:meth:`Engine.admit`'s result. :meth:`Engine.admit` also makes HAMi's ResourceQuota pre-check (§11.3): a pod whose
request alone exceeds its namespace's quota is denied (403, reason ``Forbidden``) with "exceeding resource quota".
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from hami_core.engine.facade import Engine
from hami_core.engine.pods import metadata, pod_ref, pod_shape_error
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed, HamiError
from hami_core.scheduler.extender import BadRequest
from hami_core.wire import keys

__all__ = ["Webhook", "json_patch", "pointer"]

log = logging.getLogger("hami.scheduler.webhook")

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


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


class Webhook:
    """Admits pods through :meth:`Engine.admit` (the engine lock is shared with the extender)."""

    def __init__(self, engine: Engine, *, engine_lock: threading.RLock | None = None) -> None:
        self.engine = engine
        self.lock = engine_lock if engine_lock is not None else threading.RLock()

    def review(self, body: Any) -> dict[str, Any]:
        """Answer one ``AdmissionReview``; raises :class:`BadRequest` when it is not one."""
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
        response = self._respond(request)
        response["uid"] = uid
        return {"apiVersion": version, "kind": "AdmissionReview", "response": response}

    def _respond(self, request: Mapping[str, Any]) -> dict[str, Any]:
        pod = request.get("object")
        if not isinstance(pod, Mapping):
            return {"allowed": False, "status": {"code": 400, "message": "request.object is not a Pod object"}}
        shape = pod_shape_error(pod)
        if shape is not None:
            return {"allowed": False, "status": {"code": 400, "message": f"request.object {pod_ref(pod)}: {shape}"}}
        labels = metadata(pod).get("labels") or {}
        if isinstance(labels, Mapping) and labels.get(keys.WEBHOOK_LABEL) == keys.WEBHOOK_IGNORE:
            return {"allowed": True, "status": {"code": 200}}
        try:
            namespace = request.get("namespace")
            with self.lock:
                admitted = self.engine.admit(pod, namespace=namespace if isinstance(namespace, str) else None)
        except AdmissionDenied as exc:
            return {"allowed": False, "status": {"code": exc.code, "reason": "Forbidden", "message": str(exc)}}
        except AdmissionFailed as exc:
            return {"allowed": False, "status": {"code": exc.code, "message": str(exc)}}
        except HamiError as exc:
            return {"allowed": False, "status": {"code": 500, "message": str(exc)}}
        ops = json_patch(pod, admitted)
        out: dict[str, Any] = {"allowed": True, "status": {"code": 200}}
        if ops:
            out["patchType"] = "JSONPatch"
            out["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
        log.debug("admitted %s/%s with %d patch operation(s)", metadata(pod).get("namespace"),
                  metadata(pod).get("name"), len(ops))
        return out
