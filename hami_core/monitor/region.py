"""HAMi-core's shared region (``<containers-dir>/<podUID>_<container>/*.cache``), layouts v0 and v1 (node spec §3.3).

The file is read with ``pread`` at fixed offsets, never mapped: a container owns its cache file and may truncate
it at any moment (a restarted container does), and a load from a mapping past the new end of the file raises
``SIGBUS``, which kills the whole monitor; no check before the load can close that window. A short ``pread`` is
an ordinary error instead (:class:`RegionError`, "file shrank"). A scrape costs three reads per file: the
header with the device table, the trailer with the counters, and the ``proc_num`` process slots in use (numpy
parses them from the bytes read), never the whole 2 MB file.

HAMi-core writes the file concurrently through its own mapping (the page cache is shared, so ``pread`` sees
its stores); nothing here takes its semaphore. 32- and 64-bit aligned loads and stores are atomic on x86-64,
which is what HAMi relies on too. The feedback loop writes two 4-byte fields with ``pwrite``, only while the
file still covers the layout.
"""

from __future__ import annotations

import errno
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
    """One open shared-region file, read with ``pread``. Not thread-safe on its own: the caller serialises access."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.writable = True
        self._fd = -1
        # The containers directory is writable from inside the containers (HAMi makes it 0777), so a cache file
        # may be a planted symlink or device node: never follow a link, never block on a FIFO, read regular files
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
        self._fd = fd
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RegionError("is not a regular file")
            if st.st_size < 12:
                raise RegionError(f"file is {st.st_size} bytes, shorter than a header", retry=True)
            self.size, self.inode = st.st_size, st.st_ino
            magic, major, minor = struct.unpack("<iii", self._read(0, 12))
            if magic != MAGIC:
                # 0 = HAMi-core created the file but has not initialised it yet (half-written).
                raise RegionError("not initialised yet (magic 0)" if magic == 0 else f"bad magic {magic}",
                                  retry=magic == 0)
            self.layout = select_layout(st.st_size, major)
            self.major, self.minor = (1, minor) if self.layout is LAYOUT_V1 else (0, 0)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _current_size(self) -> int:
        if self._fd < 0:
            raise RegionError("closed")
        return os.fstat(self._fd).st_size

    def check(self) -> None:
        """Raise :class:`RegionError` when the file no longer covers the layout (it was truncated)."""
        size = self._current_size()
        if size < self.layout.size:
            raise RegionError(f"file shrank from {self.size} to {size} bytes")

    def _read(self, off: int, n: int) -> bytes:
        """``n`` bytes at ``off``; a file that ends before them was truncated under us."""
        if self._fd < 0:
            raise RegionError("closed")
        data = os.pread(self._fd, n, off)
        if len(data) < n:
            raise RegionError(f"file shrank from {self.size} to {self._current_size()} bytes")
        return data

    # ---------------------------------------------------------------------------------------- fields
    def _i32(self, off: int) -> int:
        return _I32.unpack(self._read(off, 4))[0]

    def _set_i32(self, off: int, value: int) -> None:
        if not self.writable:
            raise RegionError("opened read-only")
        # pwrite past the end would grow a truncated file back (with zeros): write only while it covers the
        # layout. A truncation between this check and the write can still do so; HAMi-core then finds magic 0
        # and initialises the file again, as it does for a new one.
        self.check()
        os.pwrite(self._fd, _I32.pack(value), off)

    @property
    def device_num(self) -> int:
        return min(max(_U64.unpack(self._read(self.layout.device_num, 8))[0], 0), MAX_DEVICES)

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
        return 0 if off is None else _I64.unpack(self._read(off, 8))[0]

    def uuid_field(self, i: int) -> bytes:
        return self._read(self.layout.uuids + i * UUID_FIELD, UUID_FIELD)

    def device_uuids(self) -> list[tuple[int, bytes, str]]:
        """``(index, raw 96-byte field, label)`` for each valid device (byte 0 not NUL, first 40 bytes UTF-8)."""
        lay = self.layout
        return _device_uuids(self._read(0, lay.uuids + MAX_DEVICES * UUID_FIELD), lay)

    def snapshot(self) -> Snapshot:
        """Every field the exporter needs: the head (device table, limits), the trailer (counters) and the live
        process slots, one ``pread`` each."""
        lay = self.layout
        head = self._read(0, lay.procs)
        tail = self._read(lay.proc_num, lay.size - lay.proc_num)
        n, switch, recent, priority = struct.unpack_from("<iiii", tail, 0)
        n = min(max(n, 0), MAX_PROCS)
        last = 0 if lay.last_kernel_time is None else _I64.unpack_from(tail, lay.last_kernel_time - lay.proc_num)[0]
        devices = _device_uuids(head, lay)
        usage: list[DeviceUsage] = []
        if devices:
            dn = devices[-1][0] + 1
            limits = np.frombuffer(head, "<u8", dn, lay.limit).tolist()
            sm_limits = np.frombuffer(head, "<u8", dn, lay.sm_limit).tolist()
            slots = np.frombuffer(self._read(lay.procs, n * lay.slot.itemsize), lay.slot, n) if n else None
            live = slots[slots["status"] != 0] if slots is not None else ()
            if len(live):
                used = live["used"][:, :dn, :5].sum(axis=0, dtype=np.uint64).tolist()
                sm = live["util"][:, :dn, 2].sum(axis=0, dtype=np.uint64).tolist()
            else:
                used, sm = [[0] * 5] * dn, [0] * dn
            for i, _raw, label in devices:
                ctx, mod, data, _off, total = used[i]
                usage.append(DeviceUsage(i, label, limits[i], sm_limits[i], total, ctx, mod, data, sm[i]))
        return Snapshot(lay.name, usage, n, switch, recent, priority, last)

    def __repr__(self) -> str:
        return f"RegionFile({self.path!r}, {self.layout.name})"

    def __enter__(self) -> RegionFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _device_uuids(head: bytes, lay: Layout) -> list[tuple[int, bytes, str]]:
    """The valid devices of a region whose first bytes are ``head``: byte 0 of the UUID field is not NUL and its
    first 40 bytes are UTF-8 (a container writes these bytes; the label must be valid text)."""
    count = min(max(_U64.unpack_from(head, lay.device_num)[0], 0), MAX_DEVICES)
    out = []
    for i in range(count):
        off = lay.uuids + i * UUID_FIELD
        raw = head[off:off + UUID_FIELD]
        if raw[0] == 0:
            continue
        try:
            label = raw[:UUID_LABEL].split(b"\0", 1)[0].decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append((i, raw, label))
    return out
