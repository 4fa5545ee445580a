"""A vendor's :class:`ContainerAllocation` as a CDI spec or as edits to an OCI runtime ``config.json``.

Both outputs validate against the CDI and OCI runtime-spec JSON schemas (``tests/node/test_oci.py``).
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import Mapping
from typing import Any

from hami_core.plugins.types import ContainerAllocation

CDI_VERSION = "0.6.0"


def _mount_options(read_only: bool) -> list[str]:
    return ["rbind", "ro" if read_only else "rw", "nosuid", "nodev"]


def container_edits(allocation: ContainerAllocation) -> dict[str, Any]:
    """CDI ``containerEdits``: env ``K=V``, mounts and device nodes."""
    edits: dict[str, Any] = {}
    if allocation.env:
        edits["env"] = [f"{k}={v}" for k, v in sorted(allocation.env.items())]
    if allocation.mounts:
        edits["mounts"] = [{"hostPath": m.host_path, "containerPath": m.container_path,
                            "options": _mount_options(m.read_only)} for m in allocation.mounts]
    if allocation.devices:
        edits["deviceNodes"] = [{"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}
                                for d in allocation.devices]
    return edits


def to_cdi_spec(allocation: ContainerAllocation, *, kind: str, device_name: str) -> dict[str, Any]:
    """A CDI spec with one device ``device_name`` of ``kind`` (``vendor/class``) carrying the allocation."""
    device: dict[str, Any] = {"name": device_name, "containerEdits": container_edits(allocation)}
    if allocation.annotations:
        device["annotations"] = dict(allocation.annotations)
    return {"cdiVersion": CDI_VERSION, "kind": kind, "devices": [device]}


def cdi_device_name(kind: str, device_name: str) -> str:
    """The fully qualified name kubelet passes in ``CDIDevice.name``: ``vendor/class=name``."""
    return f"{kind}={device_name}"


def _device_numbers(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISCHR(st.st_mode):
        return "c", os.major(st.st_rdev), os.minor(st.st_rdev)
    if stat.S_ISBLK(st.st_mode):
        return "b", os.major(st.st_rdev), os.minor(st.st_rdev)
    return None


def apply_to_oci(config: Mapping[str, Any], allocation: ContainerAllocation) -> dict[str, Any]:
    """A copy of an OCI runtime ``config.json`` with the allocation's env, bind mounts, devices and annotations.

    Env replaces a variable of the same name. A device node's type and numbers come from its host path;
    one that is not a device node on this machine raises ``ValueError``.
    """
    out = copy.deepcopy(dict(config))
    process = out.setdefault("process", {})
    env = [e for e in process.get("env", []) if e.split("=", 1)[0] not in allocation.env]
    process["env"] = env + [f"{k}={v}" for k, v in allocation.env.items()]
    mounts = out.setdefault("mounts", [])
    for m in allocation.mounts:
        mounts.append({"destination": m.container_path, "type": "bind", "source": m.host_path,
                       "options": _mount_options(m.read_only)})
    if allocation.devices:
        linux = out.setdefault("linux", {})
        devices = linux.setdefault("devices", [])
        rules = linux.setdefault("resources", {}).setdefault("devices", [])
        for d in allocation.devices:
            numbers = _device_numbers(d.host_path)
            if numbers is None:
                raise ValueError(f"{d.host_path} is not a device node")
            kind, major, minor = numbers
            devices.append({"path": d.container_path, "type": kind, "major": major, "minor": minor})
            rules.append({"allow": True, "type": kind, "major": major, "minor": minor, "access": d.permissions})
    if allocation.annotations:
        out.setdefault("annotations", {}).update(allocation.annotations)
    return out
