"""HAMi's Iluvatar backends, scheduler side (vendors.md Part F; Part A.3-A.8; J.1-J.3).

One :class:`IluvatarBackend` per configured chip; its common word (``MR-V100``, ``BI-V150``, ...) is the request
Type and part of every annotation key. It is a :class:`~hami_core.plugins.StandardBackend`: the generic handshake
health rule on ``hami.io/node-handshake-<commonWord>`` (A.5), the standard fit with the type rule, UUID selection
and ``mutex`` (A.7, A.8, F.3), the allocation annotations (A.4) and the shared node lock (A.6) are HAMi's generic
behaviour. What differs: the registration is the legacy form only (F.2), admission adds cores and an env var
(F.3), and two request steps (F.3, J.2, J.3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hami_core.plugins import (
    AdmissionFailed,
    DeviceInfo,
    Mutation,
    ResourceNames,
    StandardBackend,
    WireFormatError,
    as_int64,
    resource,
)

# Not from hami_core.plugins: there the name ``annotations`` is the ``from __future__ import annotations`` feature.
from hami_core.plugins.objects import annotations
from hami_core.wire import keys
from hami_core.wire.common import wire_error
from hami_core.wire.nodes import decode_node_devices_legacy
from hami_core.wire.quantity import parse_quantity
from hami_iluvatar.config import IluvatarChipConfig

VENDOR = "iluvatar"
#: One ``.vMem`` unit is 256 MiB (HAMi ``MemoryFactor``; also scales quota limits).
MEMORY_FACTOR = 256
#: Env var naming the container for the Iluvatar runtime. The misspelling is HAMi's, kept for compatibility.
CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"


@dataclass(frozen=True, slots=True)
class IluvatarBackend(StandardBackend):
    """The backend of one ``iluvatars:`` chip (HAMi ``InitIluvatarDevice``, F.1-F.3)."""

    #: ``MemPercentagereq``: 100 (the whole card) without memory, else 0 (``Memreq`` wins)
    memory_given_percentage: ClassVar[int] = 0

    @classmethod
    def from_config(cls, chip: IluvatarChipConfig) -> IluvatarBackend:
        """The backend for one validated ``iluvatars:`` entry; every key derives from its common word.

        ``standard_capacity`` holds because the fit is HAMi's standard template unchanged.
        """
        word = chip.common_word
        return cls(
            name=word,
            vendor=VENDOR,
            resource_names=ResourceNames(count=chip.resource_count_name, memory=chip.resource_memory_name,
                                         cores=chip.resource_core_name, memory_factor=MEMORY_FACTOR),
            register_annotation=f"hami.io/node-{word}-register", handshake_annotation=f"hami.io/node-handshake-{word}",
            to_allocate_annotation=f"hami.io/{word}-devices-to-allocate",
            allocated_annotation=f"hami.io/{word}-devices-allocated",
            use_uuid_annotation=f"hami.io/use-{word}-uuid", nouse_uuid_annotation=f"hami.io/no-use-{word}-uuid",
            lock_annotation=keys.NODE_LOCK, standard_capacity=True,
            cleanup_handshake=False,  # HAMi's Iluvatar NodeCleanUp leaves the handshake alone (vendors F.3)
            config=chip,
        )

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """Devices from ``hami.io/node-<commonWord>-register`` (HAMi ``GetNodeDevices``, F.2, A.3 form 2).

        Only the legacy colon/comma list (``GPU-bad5...,10,8192,100,MR-V100,0,true:``), not JSON: HAMi's
        Iluvatar decoder reads no other form. No annotation means no devices; a value that decodes to no
        device (``":"``) is HAMi's "no gpu found on node" error, so, like a malformed value, it raises
        :class:`WireFormatError` and the engine keeps the node's previous devices.
        """
        key = self.register_annotation or ""
        raw = annotations(node).get(key)
        if raw is None:
            return []
        if not isinstance(raw, str):
            raise wire_error(key, f"expected a string, got {type(raw).__name__}")
        devices = decode_node_devices_legacy(raw, key=key)
        if not devices:
            raise wire_error(key, "no gpu found on node")
        return devices

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for one chip (F.3): the container uses the chip iff the count is in its limits.

        When it is: a count above 1 sets the core limit to ``count x 100`` (several cards are whole cards),
        and ``SOL_CONTINER_NAME=<container name>`` is added unless the env var exists or the container is
        unnamed. Nothing else is changed; a count only in requests is not a request here (as in HAMi).
        """
        names = self.resource_names
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count not in limits:
            return Mutation(False)
        count = _quantity_value(limits[names.count], container, names.count)
        if count > 1 and names.cores:
            limits[names.cores] = str(count * 100)
        env = container.get("env")
        name = container.get("name")
        # Not set_env: an existing entry keeps its value (HAMi only appends when the name is absent).
        if name and not any(item.get("name") == CONTAINER_NAME_ENV for item in env or ()):
            if env is None:
                env = container["env"] = []
            env.append({"name": CONTAINER_NAME_ENV, "value": name})
        return Mutation(True)

    # ----------------------------------------------------------------------------------- requests
    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        """Cores per card: 0 when absent or not an integer; HAMi keeps a negative number, which would *free*
        cores when booked, so it counts as 0; nothing drops the request."""
        value = as_int64(resource(container, self.resource_names.cores))
        return 0 if value is None else max(value, 0)


def _quantity_value(raw: Any, container: Mapping[str, Any], name: str) -> int:
    """Go ``Quantity.Value()``: the quantity rounded up to an integer; unreadable fails admission."""
    try:
        return math.ceil(parse_quantity(raw))
    except WireFormatError as exc:
        raise AdmissionFailed(f"container {container.get('name') or '<unnamed>'}: {name}={raw!r} "
                              f"is not a quantity: {exc}") from None
