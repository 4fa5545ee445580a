"""Hook implementations for the NVIDIA backend: thin adapters over :mod:`hami_nvidia.backend`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from hami_core import hookimpl
from hami_core.plugins.types import (
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    Mutation,
    PodSingleDevice,
    QuotaView,
)
from hami_core.wire import keys
from hami_core.wire.mig import encode_mig_allocations, mig_allocations_from_devices
from hami_nvidia import backend as nv
from hami_nvidia.config import parse_config


def _mine(backend: DeviceBackend) -> bool:
    return backend.vendor == nv.VENDOR and backend.name == nv.COMMON_WORD


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if "nvidia" not in config:
        return []
    return [nv.make_backend(parse_config(config["nvidia"]))]


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    return nv.node_devices(backend, node) if _mine(backend) else None


@hookimpl
def hami_node_health(backend: DeviceBackend, node: Mapping[str, Any], now: float,
                     state: MutableMapping[str, Any]) -> HealthReport | None:
    return nv.node_health(backend, node, now, state) if _mine(backend) else None


@hookimpl
def hami_node_removed(backend: DeviceBackend, node_name: str, state: MutableMapping[str, Any]) -> None:
    if _mine(backend):
        state.pop(node_name, None)


@hookimpl
def hami_mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> Mutation | None:
    return Mutation(nv.mutate_container(backend, pod, container)) if _mine(backend) else None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    return nv.container_request(backend, container) if _mine(backend) else None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy,
                      quota: QuotaView | None) -> list[FitResult] | None:
    return nv.filter_nodes(backend, pod, request, candidates, policy, quota=quota) if _mine(backend) else None


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice) -> dict[str, str] | None:
    """``hami.io/vgpu-mig-allocations`` when MIG devices were chosen (spec §3.5); the default plugin writes the
    to-allocate/allocated pair."""
    if not _mine(backend):
        return None
    allocations = mig_allocations_from_devices(devices)
    return {keys.VGPU_MIG_ALLOCATIONS: encode_mig_allocations(allocations)} if allocations else None


# ------------------------------------------------------------------------------------------ node side
from hami_core.plugins.types import ContainerAllocation, ContainerDevice, HealthWatch  # noqa: E402  (node side only)

#: Keys of what the node side keeps in the device plugin's NodeContext.state (hami_core.plugins.node_context).
_MODE, _GPUS, _MIG = "nvidia.operatingmode", "nvidia.gpus", "nvidia.mig"


def _node_context() -> Any:
    from hami_core.plugins.node_context import current

    return current()


def _operating_mode(ctx: Any) -> str:
    """This node's ``operatingmode`` (per-node config.json), read once per device plugin."""
    import os

    from hami_nvidia.config import operating_mode

    if ctx is not None and _MODE in ctx.state:
        return str(ctx.state[_MODE])
    mode = operating_mode(ctx.node_name if ctx is not None else os.environ.get("NODE_NAME", ""))
    if ctx is not None:
        ctx.state[_MODE] = mode
    return mode


def _mig_manager(backend: DeviceBackend, ctx: Any) -> Any:
    """The device plugin's one MIG manager (created on first use; needs the node context for the pod list)."""
    if ctx is None:
        raise RuntimeError("dynamic MIG needs the device plugin's node context (no pod list outside it)")
    if _MIG not in ctx.state:
        import pynvml

        from hami_nvidia.config import allowlisted_profiles
        from hami_nvidia.migmgr import MigManager

        cfg = backend.config
        discovered = ctx.state.get(_GPUS, [])
        ctx.state[_MIG] = MigManager(pynvml, [(g.uuid, g.model) for g in discovered if g.mig_profiles],
                                     ctx.list_pods,
                                     allowlisted=lambda model: allowlisted_profiles(cfg, model) is not None,
                                     other_models=[g.model for g in discovered if not g.mig_profiles])
    return ctx.state[_MIG]


@hookimpl
def hami_discover_devices(backend: DeviceBackend) -> list[DeviceInfo] | None:
    """hami-core/mps: every GPU with deviceSplitCount replicas; mig (per-node config.json): the GPUs with
    allowlisted MIG profiles, each registered with its profiles (spec node.md §2.5, §2.12 b)."""
    if not _mine(backend):
        return None
    from hami_core.plugins.errors import ConfigError
    from hami_nvidia import detect
    from hami_nvidia import node as nv_node

    ctx = _node_context()
    mode = _operating_mode(ctx)
    try:
        gpus = detect.discover(pre_configured_memory_mib=backend.config.pre_configured_device_memory,
                               mig_profiles=mode == "mig")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if ctx is not None:
        ctx.state[_GPUS] = gpus
    if mode == "mig":
        import logging

        infos = nv_node.mig_device_infos(backend.config, gpus)
        logging.getLogger("hami.nvidia.mig").info("operatingmode mig: %d of %d GPUs registered with MIG profiles",
                                                  len(infos), len(gpus))
        return infos
    return nv_node.device_infos(backend.config, gpus, mode=mode)


@hookimpl
def hami_watch_health(backend: DeviceBackend, devices: Sequence[DeviceInfo],
                      on_health: Callable[[str, bool], None]) -> HealthWatch | None:
    """NVML XID events (spec node.md §2.11); none with DP_DISABLE_HEALTHCHECKS=all/xids or fake GPUs.

    In ``operatingmode: mig`` the watch also runs the MIG startup pass and reconciles every 5 s (§2.12 b);
    its ``stop()`` ends both threads.
    """
    if not _mine(backend):
        return None
    from hami_nvidia import node as nv_node

    ctx = _node_context()
    xid = nv_node.watch_health(devices, on_health)
    if _operating_mode(ctx) != "mig":
        return xid
    from hami_nvidia.migmgr import Reconciler

    try:
        reconciler = Reconciler(_mig_manager(backend, ctx)).start()
    except Exception:
        if xid is not None:
            xid.stop()
        raise
    return nv_node.MigWatch(xid, reconciler)


@hookimpl
def hami_allocate(backend: DeviceBackend, pod: Mapping[str, Any], container_index: int,
                  devices: Sequence[ContainerDevice]) -> ContainerAllocation | None:
    if not _mine(backend):
        return None
    from hami_nvidia import node as nv_node

    ctx = _node_context()
    if _operating_mode(ctx) == "mig":
        return nv_node.mig_allocation(_mig_manager(backend, ctx), pod, container_index, devices)
    return nv_node.allocation(backend.config, pod, container_index, devices)
