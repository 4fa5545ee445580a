"""The usage ledger: which pod holds what on which node, booked incrementally (never recomputed).

Bookings are stored collapsed (spec §6.3): per backend and device UUID, init containers count as a
peak and app containers as a sum, so one pod contributes one entry per device.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hami_core.engine.inventory import NodeState
from hami_core.engine.quota import QuotaCache
from hami_core.plugins.types import ContainerDevice, MigInstance, Placement, PodDevices
from hami_core.wire.mig import MIG_PLACEMENT_CUSTOM_INFO, MIG_PROFILE_CUSTOM_INFO, MigAllocation

log = logging.getLogger("hami.engine")


@dataclass(frozen=True, slots=True)
class Booking:
    """One pod's collapsed usage on one node.

    ``mig``: the pod's MIG instances per GPU UUID (its ``hami.io/vgpu-mig-allocations``, or the placements a
    reservation chose), booked on the GPUs' ``mig_in_use``.
    """

    key: str
    pod: str
    node: str
    devices: Mapping[str, tuple[ContainerDevice, ...]]
    mig: Mapping[str, tuple[MigInstance, ...]] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        """The pod's namespace (``pod`` is ``namespace/name``)."""
        return self.pod.partition("/")[0]




def mig_from_devices(devices: PodDevices) -> dict[str, tuple[MigInstance, ...]]:
    """MIG instances per GPU UUID chosen in a pod assignment (``ContainerDevice.custom_info`` holds the profile and
    placement a MIG fit chose; other devices contribute nothing). Empty for a pod without MIG devices."""
    out: dict[str, list[MigInstance]] = {}
    for containers in devices.values():
        for ctr in containers:
            for d in ctr:
                info = d.custom_info
                if not info:
                    continue
                profile = info.get(MIG_PROFILE_CUSTOM_INFO)
                placement = info.get(MIG_PLACEMENT_CUSTOM_INFO)
                if isinstance(profile, str) and profile and isinstance(placement, Placement) and placement.size:
                    out.setdefault(d.uuid, []).append(MigInstance(profile, placement))
    return {uuid: tuple(v) for uuid, v in out.items()}


def mig_from_allocations(allocations: Iterable[MigAllocation]) -> dict[str, tuple[MigInstance, ...]]:
    """MIG instances per GPU UUID from a decoded ``hami.io/vgpu-mig-allocations`` (runtime identity kept)."""
    out: dict[str, list[MigInstance]] = {}
    for a in allocations:
        out.setdefault(a.gpu_uuid, []).append(MigInstance(a.profile, a.placement, a.mig_uuid, a.gpu_instance_id,
                                                          a.compute_instance_id))
    return {uuid: tuple(v) for uuid, v in out.items()}


class Ledger:
    """Bookings by pod key, indexed by node, applied to :class:`NodeState` usage as they change.

    With a ``quota`` cache, every booking charges its namespace and every unbooking takes the charge back (every
    reserve, watch update and removal goes through :meth:`book` and :meth:`unbook`).
    """

    def __init__(self, quota: QuotaCache | None = None) -> None:
        self.bookings: dict[str, Booking] = {}
        self.by_node: dict[str, set[str]] = {}
        self.quota = quota

    def __len__(self) -> int:
        return len(self.bookings)

    def get(self, key: str) -> Booking | None:
        return self.bookings.get(key)

    def book(self, booking: Booking, nodes: Mapping[str, NodeState]) -> None:
        """Record ``booking``, replacing any previous booking of the same pod."""
        self.unbook(booking.key, nodes)
        self.bookings[booking.key] = booking
        self.by_node.setdefault(booking.node, set()).add(booking.key)
        if self.quota is not None:
            self.quota.charge(booking.key, booking.namespace, booking.devices)
        state = nodes.get(booking.node)
        if state is not None:
            self._apply(state, booking, 1)

    def unbook(self, key: str, nodes: Mapping[str, NodeState]) -> Booking | None:
        booking = self.bookings.pop(key, None)
        if booking is None:
            return None
        if self.quota is not None:
            self.quota.release(key)
        keys = self.by_node.get(booking.node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.by_node[booking.node]
        state = nodes.get(booking.node)
        if state is not None:
            self._apply(state, booking, -1)
        return booking

    def reapply(self, state: NodeState) -> None:
        """Book every pod of ``state.name`` onto freshly registered devices."""
        for key in sorted(self.by_node.get(state.name, ())):
            self._apply(state, self.bookings[key], 1, warn=True)

    def on_node(self, name: str) -> list[Booking]:
        return [self.bookings[k] for k in sorted(self.by_node.get(name, ()))]

    @staticmethod
    def _apply(state: NodeState, booking: Booking, sign: int, *, warn: bool = False) -> None:
        for devs in booking.devices.values():
            for d in devs:
                if not state.apply(d, sign) and (warn or sign > 0):
                    # HAMi logs and ignores usage on devices a node no longer registers.
                    log.warning("pod %s holds device %s that node %s does not register; usage ignored",
                                booking.pod, d.uuid, state.name)
        if booking.mig or state.mig:  # only pods with MIG instances and nodes with MIG GPUs pay for this
            uuids = [d.uuid for devs in booking.devices.values() for d in devs]
            state.apply_mig(booking.pod, uuids, booking.mig, sign)
