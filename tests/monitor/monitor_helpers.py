"""A writer of HAMi-core shared-region files, straight from the tables of node spec §3.3 (independent of the reader),
and a /metrics scraper."""

from __future__ import annotations

import struct
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

MAGIC = 19920718
V1_SIZE = 2_008_952
V0_SIZE = 1_197_896

# offsets per spec §3.3
V1 = {"device_num": 56, "uuids": 64, "limit": 1600, "sm_limit": 1728, "procs": 1856, "slot": 1960,
      "used": 8, "used_stride": 64, "util": 1160, "util_stride": 48, "status": 1928, "proc_num": 2_008_896,
      "switch": 2_008_900, "recent": 2_008_904, "priority": 2_008_908, "last": 2_008_912}
V0 = {"device_num": 48, "uuids": 56, "limit": 1592, "sm_limit": 1720, "procs": 1848, "slot": 1168,
      "used": 8, "used_stride": 40, "util": 776, "util_stride": 24, "status": 1160, "proc_num": 1_197_880,
      "switch": 1_197_884, "recent": 1_197_888, "priority": 1_197_892, "last": None}


@dataclass
class Proc:
    pid: int = 100
    hostpid: int = 4100
    status: int = 1
    # per device index: (context, module, data, offset, total)
    used: dict[int, tuple[int, int, int, int, int]] = field(default_factory=dict)
    # per device index: (dec, enc, sm)
    util: dict[int, tuple[int, int, int]] = field(default_factory=dict)


def region_bytes(*, version: int = 1, minor: int = 2, uuids: list[str] = (), limits: list[int] = (),
                 sm_limits: list[int] = (), procs: list[Proc] = (), proc_num: int | None = None,
                 utilization_switch: int = 1, recent_kernel: int = 0, priority: int = 1, last_kernel_time: int = 0,
                 magic: int = MAGIC, device_num: int | None = None) -> bytearray:
    lay = V1 if version == 1 else V0
    size = (V1_SIZE if version == 1 else V0_SIZE) + 1  # HAMi-core makes it sizeof + 1 bytes long
    buf = bytearray(size)
    struct.pack_into("<i", buf, 0, magic)
    if version == 1:
        struct.pack_into("<ii", buf, 4, 1, minor)
    struct.pack_into("<Q", buf, lay["device_num"], len(uuids) if device_num is None else device_num)
    for i, u in enumerate(uuids):
        raw = u.encode() if isinstance(u, str) else u
        buf[lay["uuids"] + 96 * i: lay["uuids"] + 96 * i + len(raw)] = raw
    for i, v in enumerate(limits):
        struct.pack_into("<Q", buf, lay["limit"] + 8 * i, v)
    for i, v in enumerate(sm_limits or [100] * len(uuids)):
        struct.pack_into("<Q", buf, lay["sm_limit"] + 8 * i, v)
    for s, p in enumerate(procs):
        base = lay["procs"] + s * lay["slot"]
        struct.pack_into("<ii", buf, base, p.pid, p.hostpid)
        for d, vals in p.used.items():
            struct.pack_into("<5Q", buf, base + lay["used"] + d * lay["used_stride"], *vals)
        for d, vals in p.util.items():
            struct.pack_into("<3Q", buf, base + lay["util"] + d * lay["util_stride"], *vals)
        struct.pack_into("<i", buf, base + lay["status"], p.status)
    struct.pack_into("<iiii", buf, lay["proc_num"], len(procs) if proc_num is None else proc_num,
                     utilization_switch, recent_kernel, priority)
    if lay["last"] is not None:
        struct.pack_into("<q", buf, lay["last"], last_kernel_time)
    return buf


def write_region(root: Path, pod_uid: str, container: str, file: str = "1234.cache", **kwargs: object) -> Path:
    d = root / f"{pod_uid}_{container}"
    d.mkdir(parents=True, exist_ok=True)
    path = d / file
    path.write_bytes(region_bytes(**kwargs))  # type: ignore[arg-type]
    return path


def read_i32(path: Path, version: int, name: str) -> int:
    lay = V1 if version == 1 else V0
    with open(path, "rb") as f:
        f.seek(lay[name])
        return struct.unpack("<i", f.read(4))[0]


def write_i32(path: Path, version: int, name: str, value: int) -> None:
    lay = V1 if version == 1 else V0
    with open(path, "r+b") as f:
        f.seek(lay[name])
        f.write(struct.pack("<i", value))


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``{sample name: [(labels, value), ...]}`` of a /metrics page, parsed by prometheus-client's parser."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def pod(name: str, uid: str, containers: list[str], *, namespace: str = "default", node: str = "node-a",
        init: list[str] = (), annotations: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations or {}},
            "spec": {"nodeName": node, "containers": [{"name": c} for c in containers],
                     "initContainers": [{"name": c} for c in init]}}
