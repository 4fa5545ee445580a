"""Whom a ``/filter`` or ``/bind`` names, judged on this scheduler's own copies of the pod (docs/security.md).

A request body is believed for nothing but the namespace, name and UID it names. The pod a filter acts on is the
one this scheduler's Pod watch holds under that name and UID (:mod:`.podview`; read once from the API server when
the watch has not delivered it after a short wait), pending and for this scheduler; its annotations and requests
are the view's, not the body's. A bind binds only such a pod that this scheduler filtered or that carries HAMi's
allocation for the node named, read from the API server; a bind naming a pod it cannot identify changes nothing.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hami_core.cluster.base import NotFoundError
from hami_core.cluster.refs import PodRef, resource_version
from hami_core.engine.pods import is_terminal, metadata, pod_ref, pod_shape_error
from hami_core.plugins.types import ContainerRequests
from hami_core.scheduler.extwire import BadRequest

if TYPE_CHECKING:
    from hami_core.scheduler.extender import Extender

__all__ = ["MAX_PASSED", "PodGate"]

log = logging.getLogger("hami.scheduler.extender")

#: Pods without device requests a filter passed, kept for their bind; past this the oldest is refused and filtered
#: again.
MAX_PASSED = 8192


class PodGate:
    """The extender's judgement of who a request names. Counts what it refuses in ``ext.refused`` and the filters
    whose pod the watch did not hold in ``ext.view_misses``."""

    def __init__(self, ext: Extender) -> None:
        self.ext = ext
        #: pod (namespace, name) → UID of pods without device requests that a filter passed, for their bind
        self._passed: OrderedDict[tuple[str, str], str] = OrderedDict()

    # ------------------------------------------------------------------------------------ filter
    def for_filter(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str]:
        """The pod ``body`` names (namespace, name, UID), as this scheduler's view holds it, and ``""``; or None and
        why it is refused (the filter's Error: nothing is reserved, written or recorded).

        Nothing else is read from the body: annotations, requests and schedulerName are the view's, so a crafted
        body cannot choose another pod's devices, and one naming a pod that does not exist reserves nothing. The
        view is waited for briefly (the watch may not have delivered a pod created a moment ago), then the pod is
        read from the API server once.
        """
        ext = self.ext
        meta = metadata(body)
        name, uid = meta.get("name"), meta.get("uid")
        namespace = meta.get("namespace") or "default"
        for field, value in (("name", name), ("uid", uid)):
            if not isinstance(value, str) or not value:
                raise BadRequest(f"ExtenderArgs.Pod {pod_ref(body)}: metadata.{field} must be a non-empty string")
        ref = f"{namespace}/{name}"
        seen = (ext.pods.wait(namespace, name, uid, ext.view_wait_s, through=resource_version(body))
                if ext.pods is not None else None)
        if seen is not None and seen.pod is None:
            return self._refuse(ref, "the pod has finished" if seen.finished else
                                f"spec.nodeName: the pod is already bound to node {seen.node}")
        if seen is not None and seen.pod is not None:
            pod: Mapping[str, Any] = seen.pod
        else:
            if ext.pods is not None:
                ext.view_misses += 1
                log.info("filter: pod %s (UID %s) is not in the Pod watch (which is at resourceVersion %d); reading "
                         "it", ref, uid, ext.pods.high)
            try:
                pod = ext.cluster.get_pod(namespace, name)
            except NotFoundError:
                return self._refuse(ref, f"metadata.name: no pod {name} exists in namespace {namespace}")
            except Exception as exc:
                return None, f"cannot read pod {ref}: {' '.join(str(exc).split()) or type(exc).__name__}"
            stored = str(metadata(pod).get("uid") or "")
            if stored != uid:
                return self._refuse(ref, f"metadata.uid {uid} is not the UID of the pod of that name ({stored})")
        shape = pod_shape_error(pod)  # the API server stores no such pod; an in-memory store may
        if shape is not None:
            return self._refuse(ref, f"as stored: {shape}")
        node = (pod.get("spec") or {}).get("nodeName")
        if node or is_terminal(pod):
            return self._refuse(ref, "the pod has finished" if not node else
                                f"spec.nodeName: the pod is already bound to node {node}")
        scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if scheduler != ext.ours:
            return self._refuse(ref, f"spec.schedulerName is {scheduler!r}, not {ext.ours!r}: not a pod of this "
                                "scheduler")
        return pod, ""

    def _refuse(self, ref: str, why: str) -> tuple[None, str]:
        """A refused filter: logged (no Event: the pod named may not exist, or be another tenant's)."""
        self.ext.refused += 1
        text = f"pod {ref}: {why}; nothing was reserved"
        log.warning("filter refused: %s", text)
        return None, text

    def passed(self, pod: Mapping[str, Any]) -> None:
        """Remember a pod without device requests that a filter passed, for its bind (most recent
        :data:`MAX_PASSED`)."""
        ref = PodRef.of(pod)
        with self.ext.lock:
            self._passed[ref] = str(metadata(pod).get("uid") or "")
            self._passed.move_to_end(ref)
            while len(self._passed) > MAX_PASSED:
                self._passed.popitem(last=False)

    # ------------------------------------------------------------------------------------ bind
    def for_bind(self, ref: PodRef, uid: str) -> tuple[Mapping[str, Any] | None, ContainerRequests | None, bool, str]:
        """(the pod, its requests if known, whether it is the filter's copy, ``""``), or (None, None, False, why
        not): as this replica's filter patch answered it (kube-scheduler binds what it filtered a moment ago; the
        over-commit check takes it again as of the lock's write), else read from the API server.
        ``--write-allocation bind`` always reads it: that bind needs another replica's allocation, if any.

        The pod must be the one of that name with ``uid``; when it is not, nothing is changed (no reservation of
        anyone's is dropped), except that a pod this replica decided and that is gone loses its own reservation."""
        ext = self.ext
        copy = ext.writes.filter_copy(ref, uid)
        if copy is not None:
            return copy[0], copy[1], True, ""
        try:
            fresh = ext.cluster.get_pod(*ref)
        except NotFoundError as exc:
            self._forget(ref, uid)
            return None, None, False, f"pod {ref}: {exc}"
        except Exception as exc:
            return None, None, False, f"cannot read pod {ref}: {' '.join(str(exc).split()) or type(exc).__name__}"
        stored = str(metadata(fresh).get("uid") or "")
        if stored != uid:
            return None, None, False, (f"pod {ref}: PodUID {uid} is not the UID of the pod of that name ({stored}); "
                                       "nothing was changed")
        return fresh, None, False, ""

    def _forget(self, ref: PodRef, uid: str) -> None:
        """The pod (namespace, name, ``uid``) is gone: what this replica decided for exactly that pod goes, with
        its reservation (the watch's deletion does the same; this covers one it missed)."""
        with self.ext.lock:
            if self._passed.get(ref) == uid:
                del self._passed[ref]
            self.ext.writes.gone(ref, uid)

    def bind_refusal(self, pod: Mapping[str, Any], ref: PodRef, uid: str, node: str, from_filter: bool,
                     requests: ContainerRequests | None) -> tuple[str, bool, ContainerRequests | None]:
        """(why ``pod`` cannot be bound to ``node`` here, or ``""``; whether it is bound there already; its
        requests, once they were read). Judged on the pod as stored (or as this replica's filter patch answered
        it), never on the request: a pod of this scheduler, pending, that this scheduler filtered (no device
        request) or that carries HAMi's allocation for ``node`` (under ``--write-allocation bind``,
        :meth:`WriteAtBind.at_bind <hami_core.scheduler.writes.WriteAtBind.at_bind>` also takes this replica's
        decision). Nothing is changed here. The filter's copy may be older than another replica's filter of the
        pod since: a node that differs from it is judged under the lock, from the Pod watch (the over-commit
        check)."""
        ext = self.ext
        shape = pod_shape_error(pod)
        if shape is not None:
            return f"pod {ref} as stored: {shape}", False, requests
        spec = pod.get("spec") or {}
        scheduler = spec.get("schedulerName") or "default-scheduler"
        if scheduler != ext.ours:
            return (f"pod {ref}: spec.schedulerName is {scheduler!r}, not {ext.ours!r}: not a pod of this "
                    "scheduler; nothing was changed"), False, requests
        bound = spec.get("nodeName")
        if bound:
            return ("", True, requests) if bound == node else (
                f"pod {ref}: spec.nodeName: already bound to node {bound}; nothing was changed", False, requests)
        if is_terminal(pod):
            return f"pod {ref} has finished; nothing was changed", False, requests
        with ext.lock:
            if requests is None:
                requests = ext.engine.requests(pod)
            passed = self._passed.get(ref) == uid
        if requests.empty:
            return ("" if passed else f"pod {ref} requests no device and this scheduler has not filtered it; it "
                    "must be filtered again"), False, requests
        return ext.writes.bind_refusal(pod, ref, node, from_filter), False, requests

    # ------------------------------------------------------------------------------------ watch
    def deleted(self, ref: PodRef, uid: str) -> None:
        """A Pod watch event deleted the pod (engine lock held)."""
        if self._passed.get(ref) == uid:
            del self._passed[ref]
