"""Built-in: HAMi's pod allocation annotations for legacy backends (backend objects bring their own)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.standard import standard_allocation_annotations, standard_decode_allocation
from hami_core.plugins.types import DeviceBackend, PodSingleDevice


@hookimpl(trylast=True)
def hami_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice) -> dict[str, str] | None:
    return standard_allocation_annotations(backend, devices)


@hookimpl(trylast=True)
def hami_decode_allocation(backend: DeviceBackend, pod: Mapping[str, Any]) -> PodSingleDevice | None:
    return standard_decode_allocation(backend, pod)
