"""In-test stand-in for the NVIDIA driver as ``pynvml`` (nvidia-ml-py) shows it: NOT the real binding.

It answers the calls hami-nvidia makes, with pynvml's names, types and error classes, for the GPUs listed in
``$HAMI_FAKE_NVML_GPUS`` (JSON: ``[{"uuid": ..., "name": ..., "memory_mib": ...}, ...]``):

* discovery (:func:`hami_nvidia.detect.probe_nvml`, run in the ``python -m hami_nvidia.detect`` child,
  which finds this module through ``PYTHONPATH``);
* health events (:class:`hami_nvidia.node.XidHealthWatcher`, in the test process, which imports this
  module as ``pynvml``). A test injects driver events with :func:`emit_xid` and :func:`fail_wait`, and
  :func:`settle` waits until the watcher has handled all of them (it is back in ``nvmlEventSetWait``).

Like the real binding, device handles are ctypes pointers to an opaque struct: unhashable, compared by
identity, and the event data carries a *new* pointer object to the same device, so code that keys on
handles fails here as it would on a real node. ``nvmlEventSetWait`` returns the next injected event or
raises ``NVMLError_Timeout``; it waits at most 50 ms whatever the timeout asked for (a driver may
time out early; the watcher must just wait again), so stopping the watcher takes no 5 s.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import threading
from typing import Any

GPUS_ENV = "HAMI_FAKE_NVML_GPUS"
MAX_WAIT_S = 0.05

nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8
ALL_EVENTS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10


# The names below are pynvml's own (not PEP 8), so hami-nvidia reads them exactly as on a real node.
class NVMLError(Exception):
    """pynvml's base error; the real one's ``str()`` is the driver's error string."""


class NVMLError_Timeout(NVMLError):
    def __init__(self) -> None:
        super().__init__("Timeout")


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__("Not Supported")


class NVMLError_NotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__("Not Found")


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__("GPU is lost")


class struct_c_nvmlDevice_t(ctypes.Structure):
    """Opaque, as in pynvml (a one-byte field only so that every device has its own address)."""

    _fields_ = [("_opaque", ctypes.c_char)]


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)


class c_nvmlEventData_t(ctypes.Structure):
    _fields_ = [("device", c_nvmlDevice_t), ("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Driver:
    """The state of the fake driver: its GPUs, registered events, the event queue and call counts."""

    def __init__(self) -> None:
        self.gpus: list[dict[str, Any]] = json.loads(os.environ.get(GPUS_ENV) or "[]")
        self.structs = [struct_c_nvmlDevice_t() for _ in self.gpus]
        self.strays: list[struct_c_nvmlDevice_t] = []
        self.supported: dict[str, int] = {}  # uuid -> supported event mask (default: all)
        self.register_errors: dict[str, NVMLError] = {}
        self.registered: dict[str, int] = {}
        self.events: collections.deque[Any] = collections.deque()
        self.inits = self.shutdowns = self.sets_freed = 0
        self.waiting = threading.Event()  # set by the first nvmlEventSetWait: the watcher is armed
        self.lock = threading.Lock()
        self.changed = threading.Condition()
        # True while a caller sits in nvmlEventSetWait having taken nothing since it came in: everything
        # taken before has been fully handled by then.
        self.idle_in_wait = False

    def put(self, item: Any) -> None:
        with self.changed:
            self.events.append(item)
            self.changed.notify_all()

    def settle(self, timeout: float) -> bool:
        """Wait until every injected event was handled and the watcher waits again; False on timeout."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.events and self.idle_in_wait, timeout)

    def index_of(self, handle: Any) -> int:
        if not isinstance(handle, c_nvmlDevice_t):
            raise TypeError(f"argument is not a device handle: {handle!r}")
        address = ctypes.addressof(handle.contents)
        for i, struct in enumerate(self.structs):
            if ctypes.addressof(struct) == address:
                return i
        raise NVMLError("Invalid Argument")

    def handle(self, i: int) -> Any:
        # A new pointer object on every call, as pynvml returns.
        return ctypes.cast(ctypes.addressof(self.structs[i]), c_nvmlDevice_t)


_driver = _Driver()


def reset() -> _Driver:
    """Re-read ``$HAMI_FAKE_NVML_GPUS`` and forget every event and count (call at the start of a test)."""
    global _driver
    _driver = _Driver()
    return _driver


def driver() -> _Driver:
    return _driver


def emit_xid(uuid: str, xid: int, event_type: int = nvmlEventTypeXidCriticalError) -> None:
    """The driver reports event ``event_type`` with data ``xid`` on the GPU ``uuid``."""
    d = _driver
    i = next(i for i, g in enumerate(d.gpus) if g["uuid"] == uuid)
    d.put(c_nvmlEventData_t(device=d.handle(i), eventType=event_type, eventData=xid,
                            gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF))


def emit_unknown_device_xid(xid: int) -> None:
    """An event whose device handle the driver cannot name (``nvmlDeviceGetUUID`` fails)."""
    stray = struct_c_nvmlDevice_t()
    _driver.strays.append(stray)  # keeps the memory the handle points at alive
    _driver.put(c_nvmlEventData_t(device=ctypes.pointer(stray), eventType=nvmlEventTypeXidCriticalError,
                                  eventData=xid))


def settle(timeout: float) -> bool:
    """True once every injected event was handled and the watcher waits for the next one."""
    return _driver.settle(timeout)


def fail_wait(error: NVMLError) -> None:
    """The next ``nvmlEventSetWait`` raises ``error`` (e.g. :class:`NVMLError_GpuIsLost`)."""
    _driver.put(error)


# ------------------------------------------------------------------------------------------ the API
def nvmlInit() -> None:
    with _driver.lock:
        _driver.inits += 1


def nvmlShutdown() -> None:
    with _driver.lock:
        _driver.shutdowns += 1


def nvmlDeviceGetCount() -> int:
    return len(_driver.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> Any:
    if not 0 <= index < len(_driver.gpus):
        raise NVMLError("Invalid Argument")
    return _driver.handle(index)


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> Any:
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    for i, g in enumerate(_driver.gpus):
        if g["uuid"] == uuid:
            return _driver.handle(i)
    raise NVMLError_NotFound()


def nvmlDeviceGetUUID(handle: Any) -> str:
    return str(_driver.gpus[_driver.index_of(handle)]["uuid"])


def nvmlDeviceGetIndex(handle: Any) -> int:
    return _driver.index_of(handle)


def nvmlDeviceGetName(handle: Any) -> str:
    return str(_driver.gpus[_driver.index_of(handle)].get("name", "NVIDIA H200"))


def nvmlDeviceGetMemoryInfo(handle: Any) -> Any:
    mib = int(_driver.gpus[_driver.index_of(handle)].get("memory_mib", 0))
    return _Memory(total=mib * 1024 * 1024, free=mib * 1024 * 1024, used=0)


def nvmlDeviceGetPciInfo(handle: Any) -> Any:
    raise NVMLError_NotSupported()


def nvmlDeviceGetMinorNumber(handle: Any) -> int:
    return _driver.index_of(handle)


def nvmlDeviceGetMigMode(handle: Any) -> list[int]:
    raise NVMLError_NotSupported()


def nvmlEventSetCreate() -> Any:
    return ctypes.c_void_p(id(_driver))


def nvmlDeviceGetSupportedEventTypes(handle: Any) -> int:
    return _driver.supported.get(nvmlDeviceGetUUID(handle), ALL_EVENTS)


def nvmlDeviceRegisterEvents(handle: Any, event_types: int, event_set: Any) -> None:
    uuid = nvmlDeviceGetUUID(handle)
    if uuid in _driver.register_errors:
        raise _driver.register_errors[uuid]
    _driver.registered[uuid] = int(event_types)


def nvmlEventSetWait(event_set: Any, timeoutms: int) -> Any:
    d = _driver
    d.waiting.set()
    with d.changed:
        d.idle_in_wait = True
        d.changed.notify_all()
        if not d.changed.wait_for(lambda: d.events, min(timeoutms / 1000, MAX_WAIT_S)):
            raise NVMLError_Timeout()
        item = d.events.popleft()
        d.idle_in_wait = False
    if isinstance(item, NVMLError):
        raise item
    return item


def nvmlEventSetFree(event_set: Any) -> None:
    with _driver.lock:
        _driver.sets_freed += 1
