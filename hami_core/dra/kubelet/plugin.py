"""The kubelet DRA plugin: ``NodePrepareResources`` / ``NodeUnprepareResources`` and plugin registration.

Kubelet's plugin watcher finds ``<registry_dir>/<driver>-reg.sock``, calls ``GetInfo`` (type ``DRAPlugin``, the
driver name, the endpoint ``<plugins_dir>/<driver>/dra.sock``, supported versions ``v1.DRAPlugin``), connects to
the endpoint and reports back with ``NotifyRegistrationStatus``. For each pod that uses a claim allocated to this
driver on this node, it calls ``NodePrepareResources`` before starting the containers and
``NodeUnprepareResources`` once no pod uses the claim any more; both are retried until they succeed.

Prepare, per claim: read the ResourceClaim from the API server, refuse it if its UID is not the one kubelet names
(a claim deleted and re-created under the same name), take its allocation results for this driver and pool
(:mod:`hami_core.dra.kubelet.claims`), ask the vendor for the container's environment exactly as the device plugin
does (an :data:`Allocator`, normally :func:`hook_allocator`: the backend's ``hami_allocate`` hook), write a CDI
spec carrying it (:mod:`hami_core.dra.cdi`) and record the claim in the checkpoint
(:mod:`hami_core.dra.checkpoint`). A claim already in the checkpoint, whose spec is still on disk, gets the
recorded answer without being read or rewritten, across retries and plugin restarts. Unprepare removes the
checkpoint entry and the spec; an unknown claim succeeds.

Errors are per claim, in the response's ``error`` field, naming the claim and the field; an unexpected exception
is logged here with its traceback and reported to kubelet as one line. A request with more than
:data:`MAX_CLAIMS` claims, or a claim whose fields are missing or oversized, is refused the same way.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import grpc

from hami_core.dra import cdi
from hami_core.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from hami_core.dra.kubelet.claims import AllocatedDevice, ClaimError, DeviceLookup, allocated_devices
from hami_core.dra.kubelet.registration import api_pb2 as reg_pb
from hami_core.dra.kubelet.registration import api_pb2_grpc as reg_grpc
from hami_core.dra.kubelet.sockets import bind_unix
from hami_core.dra.kubelet.v1 import api_pb2 as pb
from hami_core.dra.kubelet.v1 import api_pb2_grpc as pb_grpc
from hami_core.dra.model import driver_name
from hami_core.plugins.errors import HamiError
from hami_core.plugins.node_context import NodeContext, bound
from hami_core.plugins.types import ContainerAllocation, ContainerDevice, DeviceBackend

__all__ = ["DRA_SERVICE", "MAX_CLAIMS", "PLUGIN_TYPE", "Allocator", "ClaimSource", "DeviceLookup",
           "DraPluginServicer", "KubeletPlugin", "PluginHost", "RegistrationServicer", "hook_allocator",
           "serve_kubelet_plugin", "serve_kubelet_plugins"]

log = logging.getLogger("hami.dra.kubelet")

PLUGIN_TYPE = "DRAPlugin"
#: The gRPC service kubelet (1.34+) looks for in ``supported_versions`` (k8s.io/kubelet/pkg/apis/dra/v1).
DRA_SERVICE = "v1.DRAPlugin"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
#: Claims per call: kubelet sends one pod's claims (a pod has at most 128 resourceClaims).
MAX_CLAIMS = 128
#: A request's size on the wire: 128 claims of three 253-byte strings fit many times over.
MAX_MESSAGE_BYTES = 1 << 20
#: Names are DNS subdomains (253), UIDs are UUIDs; anything longer is not from kubelet.
MAX_NAME = 253
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
#: A namespace is a DNS label, a claim name a DNS subdomain: nothing that could change the API path read.
_NAMES = {"namespace": (re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"), "a DNS label"),
          "name": (re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"), "a DNS subdomain")}
#: The container name HAMi's vendor hooks see for a claim (its cache dir is ``<claim uid>_<this>``).
CLAIM_CONTAINER = "dra-claim"

#: Builds one claim's container environment from its devices: ``(pod, devices) -> ContainerAllocation``. ``pod``
#: is a stand-in naming the claim (``metadata.uid`` = the claim's UID, one container :data:`CLAIM_CONTAINER`).
Allocator = Callable[[Mapping[str, Any], Sequence[ContainerDevice]], ContainerAllocation]


class ClaimSource(Protocol):
    """Where ResourceClaims are read (a :class:`hami_core.cluster.base.Cluster`)."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]: ...


def hook_allocator(hook: Any, backend: DeviceBackend, context: NodeContext | None = None) -> Allocator:
    """An :data:`Allocator` calling the vendor's ``hami_allocate`` for ``backend``, with ``context`` bound as the
    device plugin binds its own: the device plugin's env (HAMi-core's ``CUDA_DEVICE_MEMORY_LIMIT_<i>``,
    ``CUDA_DEVICE_SM_LIMIT``, ``NVIDIA_VISIBLE_DEVICES``, the library, cache-dir and ``ld.so.preload`` mounts),
    reused rather than re-derived. ``hook`` routes per-backend hooks, as the device plugin's does:
    ``hami_core.plugins.relay.RoutedHooks(pm, [backend])``."""

    def allocate(pod: Mapping[str, Any], devices: Sequence[ContainerDevice]) -> ContainerAllocation:
        with bound(context) if context is not None else contextlib.nullcontext():
            alloc = hook.hami_allocate(backend=backend, pod=pod, container_index=0, devices=list(devices))
        if alloc is None:
            raise HamiError(f"no plugin implements hami_allocate for backend {backend.name}")
        return alloc

    return allocate


def _claim_label(claim: Any) -> str:
    return f"{claim.namespace}/{claim.name} (uid {claim.uid})"


def _check_claim(claim: Any) -> str | None:
    """Why a request's claim is malformed, or None."""
    for fld, (pattern, what) in _NAMES.items():
        value = getattr(claim, fld)
        if not pattern.match(value):
            return f"claim uid {claim.uid[:80]!r}: {fld} {value[:80]!r} is not {what}"
    if not _UID.match(claim.uid):
        return f"claim {claim.namespace}/{claim.name}: uid {claim.uid[:80]!r} is not a Kubernetes UID"
    return None


def merged_entries(allocated: Sequence[AllocatedDevice]) -> list[ContainerDevice]:
    """One entry per device, in order of first appearance: several shares of one card in a claim are one limit
    for HAMi-core (it sees the card once), their memory and cores summed (cores at most 100)."""
    by_uuid: dict[str, ContainerDevice] = {}
    for a in allocated:
        e = a.entry
        seen = by_uuid.get(e.uuid)
        by_uuid[e.uuid] = e if seen is None else replace(seen, usedmem=seen.usedmem + e.usedmem,
                                                           usedcores=min(100, seen.usedcores + e.usedcores))
    return list(by_uuid.values())


def _stand_in_pod(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": name, "uid": uid},
            "spec": {"containers": [{"name": CLAIM_CONTAINER}]}}


class DraPluginServicer(pb_grpc.DRAPluginServicer):
    """``v1.DRAPlugin`` for one driver on one node's pool."""

    def __init__(self, *, driver: str, pool: str, devices: DeviceLookup, claims: ClaimSource, allocate: Allocator,
                 cdi_dir: str | Path, checkpoint: Checkpoint) -> None:
        self.driver = driver
        self.pool = pool
        self.devices = devices
        self.claims = claims
        self.allocate = allocate
        self.cdi_dir = Path(cdi_dir)
        self.checkpoint = checkpoint
        # One claim at a time: prepare is rare (pod start) and the vendor's hook may not be re-entrant.
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ gRPC
    def NodePrepareResources(self, request: Any, context: Any) -> Any:  # gRPC method name
        response = pb.NodePrepareResourcesResponse()
        if len(request.claims) > MAX_CLAIMS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"NodePrepareResources: {len(request.claims)} claims, at most {MAX_CLAIMS} per call")
        for claim in request.claims:
            out = response.claims[claim.uid[:MAX_NAME]]
            error = _check_claim(claim)
            if error is None:
                error = self._guarded("preparing", claim, lambda c=claim, o=out: self._prepare_into(c, o))
            if error:
                del out.devices[:]
                out.error = error
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:  # gRPC method name
        response = pb.NodeUnprepareResourcesResponse()
        if len(request.claims) > MAX_CLAIMS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"NodeUnprepareResources: {len(request.claims)} claims, at most {MAX_CLAIMS} per call")
        for claim in request.claims:
            out = response.claims[claim.uid[:MAX_NAME]]
            error = _check_claim(claim) or self._guarded("unpreparing", claim, lambda c=claim: self.unprepare(c.uid))
            if error:
                out.error = error
        return response

    def _guarded(self, doing: str, claim: Any, fn: Callable[[], object]) -> str:
        """Run ``fn``; its error as one line ('' on success), never a traceback over gRPC."""
        try:
            fn()
        except HamiError as exc:
            log.warning("%s %s: %s", doing, _claim_label(claim), exc)
            return str(exc)
        except Exception as exc:
            log.exception("%s %s failed", doing, _claim_label(claim))
            return f"claim {_claim_label(claim)}: {doing} failed: {type(exc).__name__}: {exc}"
        return ""

    # ------------------------------------------------------------------------------------------ the work
    def _prepare_into(self, claim: Any, out: Any) -> None:
        prepared = self.prepare(claim.namespace, claim.name, claim.uid)
        for d in prepared.devices:
            dev = out.devices.add(request_names=list(d.request_names), pool_name=d.pool_name,
                                  device_name=d.device_name, cdi_device_ids=list(d.cdi_device_ids))
            if d.share_id:
                dev.share_id = d.share_id

    def prepare(self, namespace: str, name: str, uid: str) -> PreparedClaim:
        """Prepare one claim (idempotent); :class:`ClaimError` naming the claim and field."""
        label = f"{namespace}/{name}"
        with self._lock:
            known = self.checkpoint.get(uid)
            if known is not None and Path(known.spec_path).exists():
                return known
            # Not prepared, or its spec is gone (the CDI dir is on tmpfs: a reboot empties it): do it again.
            try:
                obj = self.claims.get_resource_claim(namespace, name)
            except HamiError as exc:
                raise ClaimError(f"claim {label}: cannot read it: {exc}") from None
            actual = (obj.get("metadata") or {}).get("uid")
            if actual != uid:
                raise ClaimError(f"claim {label}: metadata.uid is {actual!r}, kubelet asked for {uid!r} (the claim "
                                 f"was deleted and re-created); refusing to prepare the new one")
            allocated = allocated_devices(obj, driver=self.driver, pool=self.pool, devices=self.devices)
            alloc = self._allocate(label, namespace, name, uid, allocated)
            try:
                prepared = self._write(namespace, name, uid, allocated, alloc)
            except BaseException:
                if alloc.rollback is not None:
                    alloc.rollback()
                raise
            log.info("prepared claim %s (%s): %s", label, uid, ", ".join(a.name for a in allocated))
            return prepared

    def _allocate(self, label: str, namespace: str, name: str, uid: str,
                  allocated: Sequence[AllocatedDevice]) -> ContainerAllocation:
        try:
            return self.allocate(_stand_in_pod(namespace, name, uid), merged_entries(allocated))
        except HamiError as exc:
            raise ClaimError(f"claim {label}: the vendor refused its devices: {exc}") from None

    def _write(self, namespace: str, name: str, uid: str, allocated: Sequence[AllocatedDevice],
               alloc: ContainerAllocation) -> PreparedClaim:
        edits = cdi.container_edits(alloc)
        names: list[str] = []
        for i, a in enumerate(allocated):
            base = f"{uid}-{a.name}"
            names.append(base if base not in names else f"{base}-{i}")
        path = cdi.write_spec(self.cdi_dir, self.driver, uid, [cdi.CdiDevice(n, edits) for n in names])
        devices = tuple(PreparedDevice(request_names=(a.request,) if a.request else (), pool_name=a.pool,
                                       device_name=a.name, cdi_device_ids=(cdi.device_id(self.driver, n),),
                                       share_id=a.share_id) for a, n in zip(allocated, names, strict=True))
        prepared = PreparedClaim(namespace=namespace, name=name, uid=uid, spec_path=str(path), devices=devices)
        self.checkpoint.put(prepared)
        return prepared

    def unprepare(self, uid: str) -> None:
        """Forget a claim and remove its CDI spec; an unknown claim is no error (kubelet retries)."""
        with self._lock:
            known = self.checkpoint.remove(uid)
            if known is not None:
                Path(known.spec_path).unlink(missing_ok=True)
            # Also where a crash between writing the spec and the checkpoint would have left one.
            cdi.remove_spec(self.cdi_dir, self.driver, uid)
            if known is not None:
                log.info("unprepared claim %s/%s (%s)", known.namespace, known.name, uid)


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """``pluginregistration.Registration``: what kubelet's plugin watcher asks a DRA driver."""

    def __init__(self, driver: str, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint
        #: Set once kubelet reports the plugin registered.
        self.registered = threading.Event()
        self.last_status: tuple[bool, str] | None = None

    def GetInfo(self, request: Any, context: Any) -> Any:  # gRPC method name
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint,
                                 supported_versions=[DRA_SERVICE])

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # gRPC method name
        self.last_status = (request.plugin_registered, request.error[:4096])
        if request.plugin_registered:
            log.info("kubelet registered DRA driver %s", self.driver)
            self.registered.set()
        else:
            log.error("kubelet refused DRA driver %s: %s", self.driver, request.error[:4096])
            self.registered.clear()
        return reg_pb.RegistrationStatusResponse()


@dataclass
class KubeletPlugin:
    """A running kubelet plugin: both servers, their sockets and the servicers (for tests and the command)."""

    servicer: DraPluginServicer
    registration: RegistrationServicer
    dra_socket: Path
    registration_socket: Path
    #: (server, the socket it listens on), in start order.
    _servers: list[tuple[grpc.Server, Path]] = field(default_factory=list)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving (registration first, so kubelet stops calling) and remove the sockets this plugin bound
        (never what was at a path it could not bind)."""
        for server, path in reversed(self._servers):
            server.stop(grace).wait(5.0)
            path.unlink(missing_ok=True)
        self._servers.clear()

    def __enter__(self) -> KubeletPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server(*services: Callable[[grpc.Server], None]) -> Callable[[], grpc.Server]:
    def make() -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="hami-dra"),
                             options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.max_send_message_length", 16 * MAX_MESSAGE_BYTES)])
        for add in services:
            add(server)
        return server

    return make


def serve_kubelet_plugin(*, driver: str, node_name: str, devices: DeviceLookup, claims: ClaimSource,
                         allocate: Allocator, pool: str | None = None,
                         registry_dir: str | Path = DEFAULT_REGISTRY_DIR,
                         plugins_dir: str | Path = DEFAULT_PLUGINS_DIR, cdi_dir: str | Path = cdi.DEFAULT_CDI_DIR,
                         checkpoint_dir: str | Path | None = None) -> KubeletPlugin:
    """Start the DRA service on ``<plugins_dir>/<driver>/dra.sock`` and the registration service on
    ``<registry_dir>/<driver>-reg.sock`` (both 0600); returns the running plugin (``stop()`` it).

    ``pool`` defaults to ``node_name`` (one pool per node); ``checkpoint_dir`` to ``<plugins_dir>/<driver>``.
    Raises :class:`~hami_core.dra.checkpoint.CheckpointError` for an unreadable checkpoint and
    :class:`~hami_core.dra.kubelet.sockets.SocketError` for a socket path in use or not a socket.
    """
    plugin_dir = Path(plugins_dir) / driver
    plugin_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    checkpoint = Checkpoint(checkpoint_dir if checkpoint_dir is not None else plugin_dir)
    servicer = DraPluginServicer(driver=driver, pool=pool or node_name, devices=devices, claims=claims,
                                 allocate=allocate, cdi_dir=cdi_dir, checkpoint=checkpoint)
    dra_socket = (plugin_dir / "dra.sock").absolute()
    reg_socket = (Path(registry_dir) / f"{driver}-reg.sock").absolute()
    registration = RegistrationServicer(driver, str(dra_socket))
    plugin = KubeletPlugin(servicer, registration, dra_socket, reg_socket)
    plugin._servers.append((bind_unix(dra_socket, _server(
        lambda s: pb_grpc.add_DRAPluginServicer_to_server(servicer, s))), dra_socket))
    try:
        # Registration last: kubelet connects to the endpoint as soon as it sees the registration socket.
        plugin._servers.append((bind_unix(reg_socket, _server(
            lambda s: reg_grpc.add_RegistrationServicer_to_server(registration, s))), reg_socket))
    except BaseException:
        plugin.stop(grace=None)
        raise
    log.info("DRA driver %s serving %s, registering at %s", driver, dra_socket, reg_socket)
    return plugin


class PluginHost(Protocol):
    """What :func:`serve_kubelet_plugins` needs of the publisher (a :class:`hami_core.dra.driver.DraDriver`): the
    node, its backends, the hooks routed to them, the node context, and the device lookup."""

    node_name: str
    backends: Sequence[DeviceBackend]
    hook: Any
    context: NodeContext

    def device(self, driver: str, name: str) -> Any: ...


def serve_kubelet_plugins(host: PluginHost, claims: ClaimSource, *, registry_dir: str | Path = DEFAULT_REGISTRY_DIR,
                          plugins_dir: str | Path = DEFAULT_PLUGINS_DIR,
                          cdi_dir: str | Path = cdi.DEFAULT_CDI_DIR) -> list[KubeletPlugin]:
    """One kubelet plugin per backend of ``host`` (one DRA driver each), allocating through the vendor's
    ``hami_allocate`` in ``host``'s node context; all started, or none (the started ones stopped again)."""
    started: list[KubeletPlugin] = []
    try:
        for backend in host.backends:
            started.append(serve_kubelet_plugin(
                driver=driver_name(backend.name), node_name=host.node_name, devices=host, claims=claims,
                allocate=hook_allocator(host.hook, backend, host.context), registry_dir=registry_dir,
                plugins_dir=plugins_dir, cdi_dir=cdi_dir))
    except BaseException:
        for plugin in started:
            plugin.stop(grace=None)
        raise
    return started
