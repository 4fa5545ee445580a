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

MIG (dynamic MIG, :mod:`hami_nvidia.migmgr`): a GPU whose name contains ``A100-SXM4-40GB`` has that model's real
GPU-instance profile table (``nvidia-smi mig -lgip``: 1g.5gb id 19 x7, 1g.5gb+me id 20, 1g.10gb id 15 x4,
2g.10gb id 14 x3, 3g.20gb id 9 x2, 4g.20gb id 5, 7g.40gb id 0; 8 memory slices) and the MIG calls with
pynvml's names and signatures: MIG mode, profile info and possible placements (the ``placementsRef``/``countRef``
out-parameters), GPU instances created at a placement (overlap, instance count and MIG mode are checked),
compute instances, MIG device handles and UUIDs, the instance lookups and destroy calls. Other GPUs answer
``NOT_SUPPORTED``. A test reads and changes the state through :func:`driver` (``gpu_instances``,
``processes``, ``reset_required``) and makes a call fail once with :func:`fail_next`.
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


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self) -> None:
        super().__init__("Invalid Argument")


class NVMLError_InsufficientResources(NVMLError):
    def __init__(self) -> None:
        super().__init__("Insufficient Resources")


class NVMLError_InUse(NVMLError):
    def __init__(self) -> None:
        super().__init__("In use by another client")


class NVMLError_Unknown(NVMLError):
    def __init__(self) -> None:
        super().__init__("Unknown Error")


class struct_c_nvmlDevice_t(ctypes.Structure):
    """Opaque, as in pynvml (a one-byte field only so that every device has its own address)."""

    _fields_ = [("_opaque", ctypes.c_char)]


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)


class c_nvmlEventData_t(ctypes.Structure):
    _fields_ = [("device", c_nvmlDevice_t), ("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class c_nvmlGpuInstanceProfileInfo_v2_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint), ("isP2pSupported", ctypes.c_uint),
                ("sliceCount", ctypes.c_uint), ("instanceCount", ctypes.c_uint),
                ("multiprocessorCount", ctypes.c_uint), ("copyEngineCount", ctypes.c_uint),
                ("decoderCount", ctypes.c_uint), ("encoderCount", ctypes.c_uint), ("jpegCount", ctypes.c_uint),
                ("ofaCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong), ("name", ctypes.c_char * 96)]


class c_nvmlComputeInstanceProfileInfo_v2_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                ("sharedCopyEngineCount", ctypes.c_uint), ("sharedDecoderCount", ctypes.c_uint),
                ("sharedEncoderCount", ctypes.c_uint), ("sharedJpegCount", ctypes.c_uint),
                ("sharedOfaCount", ctypes.c_uint), ("name", ctypes.c_char * 96)]


class struct_c_nvmlGpuInstance_t(ctypes.Structure):
    _fields_ = [("_opaque", ctypes.c_char)]


c_nvmlGpuInstance_t = ctypes.POINTER(struct_c_nvmlGpuInstance_t)


class struct_c_nvmlComputeInstance_t(ctypes.Structure):
    _fields_ = [("_opaque", ctypes.c_char)]


c_nvmlComputeInstance_t = ctypes.POINTER(struct_c_nvmlComputeInstance_t)


class c_nvmlGpuInstanceInfo_t(ctypes.Structure):
    _fields_ = [("device", c_nvmlDevice_t), ("id", ctypes.c_uint), ("profileId", ctypes.c_uint),
                ("placement", c_nvmlGpuInstancePlacement_t)]


class c_nvmlComputeInstanceInfo_t(ctypes.Structure):
    _fields_ = [("device", c_nvmlDevice_t), ("gpuInstance", c_nvmlGpuInstance_t), ("id", ctypes.c_uint),
                ("profileId", ctypes.c_uint), ("placement", c_nvmlGpuInstancePlacement_t)]


class _Process:
    """What pynvml's process lists hold (the fields hami-nvidia reads)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.usedGpuMemory = 0


NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0

# A100-SXM4-40GB, as ``nvidia-smi mig -lgip`` / ``-lgipp`` show it: NVML profile index -> (profile id, name,
# slices, instances, SMs, memory MiB, placement starts, placement size). Index 7 is 1g.5gb+me, 9 is 1g.10gb.
A100_40GB_PROFILES: dict[int, tuple[int, str, int, int, int, int, tuple[int, ...], int]] = {
    0: (19, "1g.5gb", 1, 7, 14, 4864, (0, 1, 2, 3, 4, 5, 6), 1),
    1: (14, "2g.10gb", 2, 3, 28, 9856, (0, 2, 4), 2),
    2: (9, "3g.20gb", 3, 2, 42, 20096, (0, 4), 4),
    3: (5, "4g.20gb", 4, 1, 56, 20096, (0,), 4),
    4: (0, "7g.40gb", 7, 1, 98, 40448, (0,), 8),
    7: (20, "1g.5gb+me", 1, 1, 14, 4864, (0, 1, 2, 3, 4, 5, 6), 1),
    9: (15, "1g.10gb", 1, 4, 14, 9856, (0, 2, 4, 6), 2),
}
MIG_MODELS = {"A100-SXM4-40GB": A100_40GB_PROFILES}
MAX_MIG_DEVICES = 7


class _ComputeInstance:
    def __init__(self, gi: _GpuInstance, ci_id: int, profile_id: int, mig_uuid: str) -> None:
        self.gi = gi
        self.id = ci_id
        self.profile_id = profile_id
        self.mig_uuid = mig_uuid
        self.struct = struct_c_nvmlComputeInstance_t()
        self.device_struct = struct_c_nvmlDevice_t()  # the MIG device's own handle target


class _GpuInstance:
    def __init__(self, gpu: int, gi_id: int, profile_index: int, start: int, size: int) -> None:
        self.gpu = gpu
        self.id = gi_id
        self.profile_index = profile_index
        self.start = start
        self.size = size
        self.cis: dict[int, _ComputeInstance] = {}
        self.struct = struct_c_nvmlGpuInstance_t()


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
        # MIG state, per GPU index: [current, pending] mode, GPU instances by id; processes by GPU or MIG UUID.
        self.mig_mode = {i: [NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_DISABLE] for i in range(len(self.gpus))}
        self.gpu_instances: dict[int, dict[int, _GpuInstance]] = {i: {} for i in range(len(self.gpus))}
        self.processes: dict[str, list[int]] = {}
        self.reset_required: set[int] = set()  # GPUs whose MIG mode change stays pending (needs a GPU reset)
        self.failures: dict[str, collections.deque[NVMLError | None]] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.serial = 0

    def profiles(self, i: int) -> dict[int, tuple[int, str, int, int, int, int, tuple[int, ...], int]]:
        name = str(self.gpus[i].get("name", ""))
        return next((table for model, table in MIG_MODELS.items() if model in name), {})

    def enter(self, call: str) -> None:
        """Count the call and raise an error a test queued for it with :func:`fail_next`."""
        self.calls[call] += 1
        queue = self.failures.get(call)
        if queue:
            error = queue.popleft()
            if error is not None:
                raise error

    def mig_devices(self, i: int) -> list[_ComputeInstance]:
        """The GPU's MIG devices in the driver's order (by GPU instance id, then compute instance id)."""
        return [ci for gi in sorted(self.gpu_instances[i].values(), key=lambda g: g.id)
                for ci in sorted(gi.cis.values(), key=lambda c: c.id)]

    def mig_of(self, handle: Any) -> _ComputeInstance | None:
        if not isinstance(handle, c_nvmlDevice_t):
            return None
        address = ctypes.addressof(handle.contents)
        for i in self.gpu_instances:
            for ci in self.mig_devices(i):
                if ctypes.addressof(ci.device_struct) == address:
                    return ci
        return None

    def gi_of(self, handle: Any) -> _GpuInstance:
        if not isinstance(handle, c_nvmlGpuInstance_t):
            raise TypeError(f"argument is not a GPU instance handle: {handle!r}")
        address = ctypes.addressof(handle.contents)
        for instances in self.gpu_instances.values():
            for gi in instances.values():
                if ctypes.addressof(gi.struct) == address:
                    return gi
        raise NVMLError_InvalidArgument()

    def ci_of(self, handle: Any) -> _ComputeInstance:
        if not isinstance(handle, c_nvmlComputeInstance_t):
            raise TypeError(f"argument is not a compute instance handle: {handle!r}")
        address = ctypes.addressof(handle.contents)
        for instances in self.gpu_instances.values():
            for gi in instances.values():
                for ci in gi.cis.values():
                    if ctypes.addressof(ci.struct) == address:
                        return ci
        raise NVMLError_InvalidArgument()

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


def fail_next(call: str, error: NVMLError, *, after: int = 0) -> None:
    """The call of the NVML function ``call`` that comes after the next ``after`` ones raises ``error``."""
    _driver.failures.setdefault(call, collections.deque()).extend([None] * after + [error])


def live_instances(uuid: str) -> list[tuple[int, int, int, int, str]]:
    """``(gpu instance id, placement start, size, compute instance id, MIG UUID)`` on the GPU ``uuid``."""
    i = next(i for i, g in enumerate(_driver.gpus) if g["uuid"] == uuid)
    return [(ci.gi.id, ci.gi.start, ci.gi.size, ci.id, ci.mig_uuid) for ci in _driver.mig_devices(i)]


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
    mig = _driver.mig_of(handle)
    if mig is not None:
        return mig.mig_uuid
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


def _mig_gpu(handle: Any) -> int:
    """The index of a MIG-capable GPU (``NOT_SUPPORTED`` for any other)."""
    i = _driver.index_of(handle)
    if not _driver.profiles(i):
        raise NVMLError_NotSupported()
    return i


def nvmlDeviceGetMigMode(handle: Any) -> list[int]:
    _driver.enter("nvmlDeviceGetMigMode")
    return list(_driver.mig_mode[_mig_gpu(handle)])


def nvmlDeviceSetMigMode(device: Any, mode: int) -> int:
    _driver.enter("nvmlDeviceSetMigMode")
    i = _mig_gpu(device)
    if _driver.gpu_instances[i] and mode == NVML_DEVICE_MIG_DISABLE:
        raise NVMLError_InUse()
    _driver.mig_mode[i][1] = mode
    if i not in _driver.reset_required:
        _driver.mig_mode[i][0] = mode
    return 0  # activationStatus: NVML_SUCCESS


def nvmlDeviceGetGpuInstanceProfileInfo(device: Any, profile: int, version: int = 2) -> Any:
    _driver.enter("nvmlDeviceGetGpuInstanceProfileInfo")
    entry = _driver.profiles(_mig_gpu(device)).get(profile)
    if entry is None:
        raise NVMLError_NotSupported()
    pid, name, slices, count, sms, mem, _starts, _size = entry
    return c_nvmlGpuInstanceProfileInfo_v2_t(version=0x02000098, id=pid, sliceCount=slices, instanceCount=count,
                                             multiprocessorCount=sms, memorySizeMB=mem,
                                             name=f"MIG {name}".encode())


def _profile_by_id(i: int, profile_id: int) -> tuple[int, tuple[int, str, int, int, int, int, tuple[int, ...], int]]:
    for index, entry in _driver.profiles(i).items():
        if entry[0] == profile_id:
            return index, entry
    raise NVMLError_InvalidArgument()


def _out(ref: Any) -> Any:
    """The object behind an out-parameter: ``byref(x)`` or ``pointer(x)``."""
    return ref._obj if hasattr(ref, "_obj") else ref.contents


def nvmlDeviceGetGpuInstancePossiblePlacements(device: Any, profileId: int, placementsRef: Any, countRef: Any) -> int:
    _driver.enter("nvmlDeviceGetGpuInstancePossiblePlacements")
    _index, entry = _profile_by_id(_mig_gpu(device), profileId)
    starts, size = entry[6], entry[7]
    count = _out(countRef)
    if placementsRef is not None:
        if count.value < len(starts):
            raise NVMLError("Insufficient Size")
        for k, start in enumerate(starts):
            placementsRef[k].start, placementsRef[k].size = start, size
    count.value = len(starts)
    return 0


def nvmlDeviceCreateGpuInstanceWithPlacement(device: Any, profileId: int, placement: Any) -> Any:
    _driver.enter("nvmlDeviceCreateGpuInstanceWithPlacement")
    d = _driver
    i = _mig_gpu(device)
    if d.mig_mode[i][0] != NVML_DEVICE_MIG_ENABLE:
        raise NVMLError_NotSupported()
    index, entry = _profile_by_id(i, profileId)
    p = _out(placement) if not isinstance(placement, c_nvmlGpuInstancePlacement_t) else placement
    if p.start not in entry[6] or p.size != entry[7]:
        raise NVMLError_InvalidArgument()
    taken = [gi for gi in d.gpu_instances[i].values()]
    if sum(gi.profile_index == index for gi in taken) >= entry[3] or any(
            p.start < gi.start + gi.size and gi.start < p.start + p.size for gi in taken):
        raise NVMLError_InsufficientResources()
    gi_id = next(n for n in range(1, 64) if n not in d.gpu_instances[i])
    gi = _GpuInstance(i, gi_id, index, p.start, p.size)
    d.gpu_instances[i][gi_id] = gi
    return ctypes.pointer(gi.struct)


def nvmlDeviceGetGpuInstances(device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any) -> int:
    _driver.enter("nvmlDeviceGetGpuInstances")
    i = _mig_gpu(device)
    index, entry = _profile_by_id(i, profileId)
    found = [gi for gi in sorted(_driver.gpu_instances[i].values(), key=lambda g: g.id) if gi.profile_index == index]
    if len(gpuInstancesRef) < entry[3]:
        raise NVMLError("Insufficient Size")
    for k, gi in enumerate(found):
        gpuInstancesRef[k] = ctypes.pointer(gi.struct)
    _out(countRef).value = len(found)
    return 0


def nvmlDeviceGetGpuInstanceById(device: Any, gpuInstanceId: int) -> Any:
    _driver.enter("nvmlDeviceGetGpuInstanceById")
    gi = _driver.gpu_instances[_mig_gpu(device)].get(gpuInstanceId)
    if gi is None:
        raise NVMLError_NotFound()
    return ctypes.pointer(gi.struct)


def nvmlGpuInstanceGetInfo(gpuInstance: Any) -> Any:
    gi = _driver.gi_of(gpuInstance)
    return c_nvmlGpuInstanceInfo_t(device=_driver.handle(gi.gpu), id=gi.id,
                                   profileId=_driver.profiles(gi.gpu)[gi.profile_index][0],
                                   placement=c_nvmlGpuInstancePlacement_t(gi.start, gi.size))


def nvmlGpuInstanceGetComputeInstanceProfileInfo(device: Any, profile: int, engProfile: int, version: int = 2) -> Any:
    """``device`` is a GPU instance handle, as in pynvml. A GPU instance offers compute profiles up to its slices."""
    _driver.enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
    gi = _driver.gi_of(device)
    slices = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}.get(profile)
    gi_slices = _driver.profiles(gi.gpu)[gi.profile_index][2]
    if slices is None or slices > gi_slices or engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
        raise NVMLError_NotSupported()
    sms = _driver.profiles(gi.gpu)[gi.profile_index][4]
    return c_nvmlComputeInstanceProfileInfo_v2_t(version=0x02000088, id=profile, sliceCount=slices,
                                                 instanceCount=gi_slices // slices,
                                                 multiprocessorCount=sms * slices // gi_slices)


def nvmlGpuInstanceCreateComputeInstance(gpuInstance: Any, profileId: int) -> Any:
    _driver.enter("nvmlGpuInstanceCreateComputeInstance")
    d = _driver
    gi = d.gi_of(gpuInstance)
    if gi.cis:  # one shared-engine compute instance per GPU instance is all hami-nvidia makes
        raise NVMLError_InsufficientResources()
    d.serial += 1
    n = d.serial
    mig_uuid = f"MIG-{n:08x}-{gi.gpu:04x}-{gi.id:04x}-{profileId:04x}-{n:012x}"
    ci = _ComputeInstance(gi, 0, profileId, mig_uuid)
    gi.cis[ci.id] = ci
    return ctypes.pointer(ci.struct)


def nvmlGpuInstanceGetComputeInstances(gpuInstance: Any, profileId: int, computeInstancesRef: Any,
                                       countRef: Any) -> int:
    _driver.enter("nvmlGpuInstanceGetComputeInstances")
    gi = _driver.gi_of(gpuInstance)
    found = [ci for ci in sorted(gi.cis.values(), key=lambda c: c.id) if ci.profile_id == profileId]
    for k, ci in enumerate(found):
        computeInstancesRef[k] = ctypes.pointer(ci.struct)
    _out(countRef).value = len(found)
    return 0


def nvmlGpuInstanceGetComputeInstanceById(gpuInstance: Any, computeInstanceId: int) -> Any:
    _driver.enter("nvmlGpuInstanceGetComputeInstanceById")
    ci = _driver.gi_of(gpuInstance).cis.get(computeInstanceId)
    if ci is None:
        raise NVMLError_NotFound()
    return ctypes.pointer(ci.struct)


def nvmlComputeInstanceGetInfo(computeInstance: Any) -> Any:
    ci = _driver.ci_of(computeInstance)
    return c_nvmlComputeInstanceInfo_t(device=_driver.handle(ci.gi.gpu), gpuInstance=ctypes.pointer(ci.gi.struct),
                                       id=ci.id, profileId=ci.profile_id,
                                       placement=c_nvmlGpuInstancePlacement_t(0, 1))


def nvmlComputeInstanceDestroy(computeInstance: Any) -> int:
    _driver.enter("nvmlComputeInstanceDestroy")
    ci = _driver.ci_of(computeInstance)
    if _driver.processes.get(ci.mig_uuid):
        raise NVMLError_InUse()
    del ci.gi.cis[ci.id]
    return 0


def nvmlGpuInstanceDestroy(gpuInstance: Any) -> int:
    _driver.enter("nvmlGpuInstanceDestroy")
    gi = _driver.gi_of(gpuInstance)
    if gi.cis:
        raise NVMLError_InUse()
    del _driver.gpu_instances[gi.gpu][gi.id]
    return 0


def nvmlDeviceGetMaxMigDeviceCount(device: Any) -> int:
    _mig_gpu(device)
    return MAX_MIG_DEVICES


def nvmlDeviceGetMigDeviceHandleByIndex(device: Any, index: int) -> Any:
    _driver.enter("nvmlDeviceGetMigDeviceHandleByIndex")
    migs = _driver.mig_devices(_mig_gpu(device))
    if not 0 <= index < len(migs):
        raise NVMLError_NotFound()
    return ctypes.cast(ctypes.addressof(migs[index].device_struct), c_nvmlDevice_t)


def nvmlDeviceGetGpuInstanceId(device: Any) -> int:
    mig = _driver.mig_of(device)
    if mig is None:
        raise NVMLError_InvalidArgument()  # a whole GPU has no GPU instance id
    return mig.gi.id


def nvmlDeviceGetComputeInstanceId(device: Any) -> int:
    mig = _driver.mig_of(device)
    if mig is None:
        raise NVMLError_InvalidArgument()
    return mig.id


def _processes(handle: Any) -> list[_Process]:
    mig = _driver.mig_of(handle)
    uuid = mig.mig_uuid if mig is not None else nvmlDeviceGetUUID(handle)
    return [_Process(pid) for pid in _driver.processes.get(uuid, [])]


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[_Process]:
    _driver.enter("nvmlDeviceGetComputeRunningProcesses")
    return _processes(handle)


def nvmlDeviceGetGraphicsRunningProcesses(handle: Any) -> list[_Process]:
    _driver.enter("nvmlDeviceGetGraphicsRunningProcesses")
    return []


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
