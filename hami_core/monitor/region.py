"""HAMi-core's shared region (``<containers-dir>/<podUID>_<container>/*.cache``), layouts v0 and v1 (node spec §3.3).

The file is mapped once (``MAP_SHARED``, read-write when allowed) and read in place: scalar fields with
:mod:`struct` at fixed offsets, the process slots through a numpy structured view over the mapping, so a
scrape touches only the header and the ``proc_num`` slots in use, never copies the whole file.

HAMi-core writes the file concurrently; nothing here takes its semaphore. 32- and 64-bit aligned loads and
stores are atomic on x86-64, which is what HAMi relies on too. A file truncated under the mapping would raise
``SIGBUS`` on access, so every read first checks (``fstat``) that the file still covers the layout.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LAYOUT_V0", "LAYOUT_V1", "MAGIC", "DeviceUsage", "Layout", "RegionError", "RegionFile", "Snapshot"]

MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
UUID_FIELD = 96
UUID_LABEL = 40
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")


class RegionError(Exception):
    """The file is not (or no longer) a usable shared region; ``retry`` when it may become one later."""

    def __init__(self, reason: str, *, retry: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry


@dataclass(frozen=True)
class Layout:
    """Offsets of one version of ``shared_region_t`` (bytes from the start of the file)."""

    name: str
    size: int
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None
    slot: np.dtype


def _slot_dtype(size: int, used_stride: int, monitorused: int, util: int, util_stride: int,
                status: int) -> np.dtype:
    return np.dtype({
        "names": ["pid", "hostpid", "used", "monitorused", "util", "status"],
        "formats": ["<i4", "<i4", ("<u8", (MAX_DEVICES, used_stride // 8)), ("<u8", (MAX_DEVICES,)),
                    ("<u8", (MAX_DEVICES, util_stride // 8)), "<i4"],
        "offsets": [0, 4, 8, monitorused, util, status],
        "itemsize": size,
    })


LAYOUT_V1 = Layout("v1", size=2_008_952, device_num=56, uuids=64, limit=1600, sm_limit=1728, procs=1856,
                   proc_num=2_008_896, utilization_switch=2_008_900, recent_kernel=2_008_904, priority=2_008_908,
                   last_kernel_time=2_008_912,
                   slot=_slot_dtype(1960, used_stride=64, monitorused=1032, util=1160, util_stride=48, status=1928))
LAYOUT_V0 = Layout("v0", size=1_197_896, device_num=48, uuids=56, limit=1592, sm_limit=1720, procs=1848,
                   proc_num=1_197_880, utilization_switch=1_197_884, recent_kernel=1_197_888, priority=1_197_892,
                   last_kernel_time=None,
                   slot=_slot_dtype(1168, used_stride=40, monitorused=648, util=776, util_stride=24, status=1160))


@dataclass(frozen=True)
class DeviceUsage:
    """One device of a container, summed over the live process slots."""

    index: int          # vdevice index: position in the container's device list
    uuid: str           # first 40 bytes of the UUID field
    limit: int          # memory limit, bytes
    sm_limit: int       # SM limit, percent
    used: int           # Σ used.total, bytes
    context: int
    module: int
    data: int           # "buffer"
    sm_util: int        # Σ sm_util, percent


@dataclass(frozen=True)
class Snapshot:
    version: str
    devices: list[DeviceUsage]
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int


def select_layout(size: int, major: int | None) -> Layout:
    """HAMi's rule (spec §3.2 step 6): size first, then the major version."""
    if LAYOUT_V0.size <= size < LAYOUT_V1.size:
        return LAYOUT_V0
    if major == 1 and size >= LAYOUT_V1.size:
        return LAYOUT_V1
    raise RegionError(f"unknown cache file size {size} version {major}")


class RegionFile:
    """One mapped shared-region file. Not thread-safe on its own: the caller serialises access."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.writable = True
        # The containers directory is writable from inside the containers (HAMi makes it 0777), so a cache file
        # may be a planted symlink or device node: never follow a link, never block on a FIFO, map regular files
        # only. Opening /dev/watchdog or a host file read-write as root would be the container's doing.
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        if stat.S_ISLNK(os.lstat(self.path).st_mode):
            raise RegionError("is a symbolic link; only regular files are read")
        if not stat.S_ISREG(os.lstat(self.path).st_mode):  # not even opened: opening a device can act
            raise RegionError("is not a regular file")
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | flags)
            except PermissionError:
                fd = os.open(self.path, os.O_RDONLY | flags)
                self.writable = False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RegionError("is a symbolic link; only regular files are read") from None
            if exc.errno in (errno.EISDIR, errno.ENXIO):
                raise RegionError("is not a regular file") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RegionError("is not a regular file")
            if st.st_size < 12:
                raise RegionError(f"file is {st.st_size} bytes, shorter than a header", retry=True)
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
            mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, prot)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._mm, self.size, self.inode = fd, mm, st.st_size, st.st_ino
        try:
            magic = _I32.unpack_from(mm, 0)[0]
            if magic != MAGIC:
                # 0 = HAMi-core created the file but has not initialised it yet (half-written).
                raise RegionError("not initialised yet (magic 0)" if magic == 0 else f"bad magic {magic}",
                                  retry=magic == 0)
            self.layout = select_layout(st.st_size, _I32.unpack_from(mm, 4)[0])
            self.major, self.minor = ((1, _I32.unpack_from(mm, 8)[0]) if self.layout is LAYOUT_V1 else (0, 0))
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        mm, self._mm = getattr(self, "_mm", None), None
        if mm is not None:
            with contextlib.suppress(BufferError):  # a numpy view still alive somewhere; it keeps the mapping
                mm.close()
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1

    def check(self) -> None:
        """Raise :class:`RegionError` when the file no longer covers the layout (reading would fault)."""
        if self._mm is None:
            raise RegionError("closed")
        size = os.fstat(self._fd).st_size
        if size < self.layout.size:
            raise RegionError(f"file shrank from {self.size} to {size} bytes")

    # ---------------------------------------------------------------------------------------- fields
    def _i32(self, off: int) -> int:
        return _I32.unpack_from(self._mm, off)[0]  # type: ignore[arg-type]

    def _set_i32(self, off: int, value: int) -> None:
        if not self.writable:
            raise RegionError("opened read-only")
        _I32.pack_into(self._mm, off, value)  # type: ignore[arg-type]

    @property
    def device_num(self) -> int:
        return min(max(_U64.unpack_from(self._mm, self.layout.device_num)[0], 0), MAX_DEVICES)  # type: ignore[arg-type]

    @property
    def proc_num(self) -> int:
        return min(max(self._i32(self.layout.proc_num), 0), MAX_PROCS)

    @property
    def recent_kernel(self) -> int:
        return self._i32(self.layout.recent_kernel)

    @recent_kernel.setter
    def recent_kernel(self, value: int) -> None:
        self._set_i32(self.layout.recent_kernel, value)

    @property
    def utilization_switch(self) -> int:
        return self._i32(self.layout.utilization_switch)

    @utilization_switch.setter
    def utilization_switch(self, value: int) -> None:
        self._set_i32(self.layout.utilization_switch, value)

    @property
    def priority(self) -> int:
        return self._i32(self.layout.priority)

    @priority.setter
    def priority(self, value: int) -> None:
        self._set_i32(self.layout.priority, value)

    @property
    def last_kernel_time(self) -> int:
        off = self.layout.last_kernel_time
        return 0 if off is None else _I64.unpack_from(self._mm, off)[0]  # type: ignore[arg-type]

    def uuid_field(self, i: int) -> bytes:
        off = self.layout.uuids + i * UUID_FIELD
        return bytes(self._mm[off:off + UUID_FIELD])  # type: ignore[index]

    def device_uuids(self) -> list[tuple[int, bytes, str]]:
        """``(index, raw 96-byte field, label)`` for each valid device (byte 0 not NUL, first 40 bytes UTF-8)."""
        out = []
        for i in range(self.device_num):
            raw = self.uuid_field(i)
            if raw[0] == 0:
                continue
            try:
                label = raw[:UUID_LABEL].split(b"\0", 1)[0].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append((i, raw, label))
        return out

    def snapshot(self) -> Snapshot:
        """Every field the exporter needs, read in place after checking that the file still covers the layout."""
        self.check()
        lay, mm = self.layout, self._mm
        devices = self.device_uuids()
        n = self.proc_num
        usage: list[DeviceUsage] = []
        if devices:
            dn = devices[-1][0] + 1
            limits = np.ndarray((dn,), "<u8", buffer=mm, offset=lay.limit)  # type: ignore[call-overload]
            sm_limits = np.ndarray((dn,), "<u8", buffer=mm, offset=lay.sm_limit)  # type: ignore[call-overload]
            slots = np.ndarray((n,), lay.slot, buffer=mm, offset=lay.procs)  # type: ignore[call-overload]
            live = slots[slots["status"] != 0]  # copies only the live slots
            used = live["used"][:, :dn, :5].sum(axis=0, dtype=np.uint64) if len(live) else np.zeros((dn, 5), np.uint64)
            sm = live["util"][:, :dn, 2].sum(axis=0, dtype=np.uint64) if len(live) else np.zeros(dn, np.uint64)
            used_l, sm_l, lim_l, sml_l = used.tolist(), sm.tolist(), limits.tolist(), sm_limits.tolist()
            del slots, live, limits, sm_limits  # release the buffer exports on the mapping
            for i, _raw, label in devices:
                ctx, mod, data, _off, total = used_l[i]
                usage.append(DeviceUsage(i, label, lim_l[i], sml_l[i], total, ctx, mod, data, sm_l[i]))
        return Snapshot(lay.name, usage, n, self.utilization_switch, self.recent_kernel, self.priority,
                        self.last_kernel_time)

    def __repr__(self) -> str:
        return f"RegionFile({self.path!r}, {self.layout.name})"

    def __enter__(self) -> RegionFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
