"""HAMi's Hygon DCU backend, scheduler side (vendors.md Part E, with A.3, A.5, A.7, A.8 and J).

:class:`DcuBackend` is a :class:`~hami_core.plugins.StandardBackend`: HAMi's generic rules, driven by its fields,
are the DCU's — registration decoding (E.2, A.3), the generic handshake health rule on
``hami.io/node-handshake-dcu`` (A.5), admission (the count in limits, nothing changed), the standard fit with
the DCU type rule, UUID selection and ``mutex`` (E.4, A.7, A.8), the allocation annotations
``hami.io/dcu-devices-to-allocate`` / ``-allocated`` (A.4), the shared node lock ``hami.io/mutex.lock`` (A.6)
and a node score of 0 (E.4). What differs in the request is set by the base's knobs (E.4, J.2, J.3): a whole
card's cores by default, memory in MiB winning over a percentage, and an unreadable memory quantity ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from hami_core.plugins import ResourceNames, StandardBackend
from hami_core.wire import keys
from hami_hygon.config import HygonConfig

#: HAMi's common word: the request ``Type``, the pod-devices key, and what every registered type contains.
COMMON_WORD = "DCU"
VENDOR = "hygon"

REGISTER_ANNOTATION = "hami.io/node-dcu-register"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake-dcu"
TO_ALLOCATE_ANNOTATION = "hami.io/dcu-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/dcu-devices-allocated"
USE_TYPE_ANNOTATION = "hygon.com/use-dcutype"
NOUSE_TYPE_ANNOTATION = "hygon.com/nouse-dcutype"
USE_UUID_ANNOTATION = "hygon.com/use-gpuuuid"
NOUSE_UUID_ANNOTATION = "hygon.com/nouse-gpuuuid"


@dataclass(frozen=True, slots=True)
class DcuBackend(StandardBackend):
    """The Hygon DCU backend (E.1-E.4)."""

    #: a container without ``hygon.com/dcucores`` books a whole, exclusive card (E.4, J.2)
    default_cores: ClassVar[int] = 100
    #: ``MemPercentagereq``: 100 (the whole card) without memory, else 0 (``Memreq`` wins)
    memory_given_percentage: ClassVar[int] = 0
    #: a memory quantity Go's ``AsInt64`` cannot read (fractional, beyond int64) is ignored: 0, the whole card (J.3);
    #: an integer outside 0..MaxInt32, or one that overflows int32 once multiplied, still drops the request
    fractional_memory: ClassVar[Literal["drop", "ignore"]] = "ignore"

    @classmethod
    def from_config(cls, cfg: HygonConfig) -> DcuBackend:
        """The backend for a validated ``hygon:`` section (E.1-E.3)."""
        return cls(name=COMMON_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_count_name, memory=cfg.resource_memory_name,
                                                cores=cfg.resource_core_name, memory_factor=max(cfg.memory_factor, 1)),
                   register_annotation=REGISTER_ANNOTATION, handshake_annotation=HANDSHAKE_ANNOTATION,
                   to_allocate_annotation=TO_ALLOCATE_ANNOTATION, allocated_annotation=ALLOCATED_ANNOTATION,
                   use_type_annotation=USE_TYPE_ANNOTATION, nouse_type_annotation=NOUSE_TYPE_ANNOTATION,
                   use_uuid_annotation=USE_UUID_ANNOTATION, nouse_uuid_annotation=NOUSE_UUID_ANNOTATION,
                   lock_annotation=keys.NODE_LOCK, standard_capacity=True, config=cfg)
