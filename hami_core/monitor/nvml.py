"""Host GPU metrics from NVML through ``pynvml``, only where both are present.

``pynvml`` is an optional dependency: when it cannot be imported or ``nvmlInit`` fails, :class:`NvmlSource` says
so once in the log and reports no devices; the exporter then simply has no ``hami_host_*`` samples.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from dataclasses import dataclass
from typing import Any

__all__ = ["HostGpu", "NvmlSource"]

log = logging.getLogger("hami.monitor.nvml")


@dataclass(frozen=True)
class HostGpu:
    index: int
    uuid: str
    type: str                 # "NVIDIA-" + the NVML name, always prefixed (as HAMi's monitor does)
    memory_used: int | None   # bytes; None when NOT_SUPPORTED
    utilization: int | None   # utilization.gpu, 0-100
    memory_utilization: int | None  # utilization.memory, 0-100


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Lazily initialised NVML; ``module`` replaces ``pynvml`` (tests)."""

    def __init__(self, module: Any = None) -> None:
        self._nvml = module
        self._state: str | None = None  # None = not tried, "ok", "off"

    @property
    def available(self) -> bool:
        return self._init()

    def _init(self) -> bool:
        if self._state is None:
            try:
                if self._nvml is None:
                    self._nvml = importlib.import_module("pynvml")
                self._nvml.nvmlInit()
                self._state = "ok"
            except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, driver not loaded ...
                log.info("host GPU metrics disabled: NVML unavailable (%s)", " ".join(str(exc).split()) or exc)
                self._state = "off"
        return self._state == "ok"

    def devices(self) -> list[HostGpu]:
        if not self._init():
            return []
        nv = self._nvml
        try:
            count = nv.nvmlDeviceGetCount()
        except Exception as exc:
            log.warning("nvmlDeviceGetCount failed: %s", exc)
            return []
        out = []
        for i in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
                name = _text(nv.nvmlDeviceGetName(handle))
            except Exception as exc:
                log.debug("NVML device %d skipped: %s", i, exc)
                continue
            mem = util = mem_util = None
            with contextlib.suppress(Exception):  # NOT_SUPPORTED (e.g. MIG parents): no sample
                mem = int(nv.nvmlDeviceGetMemoryInfo(handle).used)
            try:
                rates = nv.nvmlDeviceGetUtilizationRates(handle)
                util, mem_util = int(rates.gpu), int(rates.memory)
            except Exception:
                pass
            out.append(HostGpu(i, uuid, f"NVIDIA-{name}", mem, util, mem_util))
        return out

    def shutdown(self) -> None:
        if self._state == "ok":
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        self._state = None
