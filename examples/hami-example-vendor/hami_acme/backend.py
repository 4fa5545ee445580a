"""The ACME NPU backend: HAMi's generic rules plus the one thing ACME does differently.

:class:`~hami_core.plugins.StandardBackend` already does what HAMi does for most vendors, driven by the fields
set in :meth:`AcmeBackend.from_config`: it decodes ``hami.io/node-acme-register``, applies the handshake health
rule, reads ``acme.com/npu`` / ``npu-mem`` / ``npu-cores`` from a container, fits with HAMi's standard
checklist (plus ``mutex``), writes the allocation annotations and takes ``hami.io/mutex.lock`` before bind.
ACME's only rule of its own: its cards share compute in quarters, so a core request is rounded up to 25 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hami_core.plugins import ResourceNames, StandardBackend
from hami_core.wire import keys

#: HAMi's "common word": the request type, and a word every registered device type contains.
COMMON_WORD = "ACME"
#: The plugin's short name: its entry point name and its section in device-config.yaml.
VENDOR = "acme"
#: ACME cards split compute in steps of this many percent.
CORE_STEP = 25


class AcmeConfig(BaseModel):
    """The ``acme:`` section of device-config.yaml (HAMi's camelCase keys; unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    resource_count_name: str = Field("acme.com/npu", alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field("acme.com/npu-mem", alias="resourceMemoryName", min_length=1)
    resource_core_name: str = Field("acme.com/npu-cores", alias="resourceCoreName", min_length=1)


class AcmeBackend(StandardBackend):
    """One ACME NPU backend. No new fields, so no ``@dataclass`` (with one, ``super()`` would need arguments)."""

    @classmethod
    def from_config(cls, cfg: AcmeConfig) -> AcmeBackend:
        return cls(
            name=COMMON_WORD,
            vendor=VENDOR,
            resource_names=ResourceNames(count=cfg.resource_count_name, memory=cfg.resource_memory_name,
                                         cores=cfg.resource_core_name),
            register_annotation="hami.io/node-acme-register",
            handshake_annotation="hami.io/node-handshake-acme",
            to_allocate_annotation="hami.io/acme-devices-to-allocate",
            allocated_annotation="hami.io/acme-devices-allocated",
            lock_annotation=keys.NODE_LOCK,
            standard_capacity=True,  # the fit is standard_fit, so the engine may prefilter nodes by capacity
            config=cfg,
        )

    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        """Cores per card, rounded up to a quarter of a card (ACME shares compute in quarters)."""
        cores = super().request_cores(container)
        if cores is None:
            return None
        return min(-(-cores // CORE_STEP) * CORE_STEP, 100) if cores else 0
