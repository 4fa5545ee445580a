"""CDI (Container Device Interface) specs for prepared ResourceClaims.

Kubelet hands a prepared claim's ``cdi_device_ids`` to the container runtime, which reads the spec files in its CDI
directory (``/var/run/cdi`` by default) and applies each named device's ``containerEdits`` to the container. The
kubelet plugin writes one spec file per claim (``<driver>-<claim uid>.json``), so unpreparing a claim is removing
one file, and one device entry per allocation result, named ``<claim uid>-<device>`` (``-<share id>`` when shared).

Every device entry of a claim carries the claim's whole allocation (HAMi-core's env and mounts for all the
claim's devices): a container served by several of the claim's devices gets the same edits more than once, which
the runtime applies idempotently (same env values, one mount per container path); a container served by one of
them still gets the complete limits. The spec is written atomically (temporary file, fsync, rename), mode 0644:
the runtime reads it, only this plugin writes it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_core.plugins.types import ContainerAllocation

__all__ = ["CDI_VERSION", "DEFAULT_CDI_DIR", "CdiDevice", "cdi_kind", "container_edits", "device_id", "remove_spec",
           "spec_path", "write_spec"]

CDI_VERSION = "0.6.0"
DEFAULT_CDI_DIR = "/var/run/cdi"
#: CDI's rules: a vendor is a domain-like name, a class a word, a device name may also hold ``.`` and ``:``.
_VENDOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]$")
_DEVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
CLASS = "claim"


def cdi_kind(driver: str) -> str:
    """The CDI kind of a driver's specs: ``<driver>/claim`` (the driver name is a DNS subdomain, a valid vendor)."""
    if not _VENDOR.match(driver):
        raise ValueError(f"driver {driver!r}: not a valid CDI vendor name")
    return f"{driver}/{CLASS}"


def device_id(driver: str, name: str) -> str:
    """The fully qualified CDI device ID kubelet passes to the runtime: ``<kind>=<name>``."""
    if not _DEVICE.match(name):
        raise ValueError(f"CDI device name {name!r}: only letters, digits and _ . : - are allowed")
    return f"{cdi_kind(driver)}={name}"


def spec_path(cdi_dir: str | Path, driver: str, claim_uid: str) -> Path:
    """Where a claim's spec lives; the UID is checked to be a plain name (it becomes part of a file name)."""
    if not _DEVICE.match(claim_uid):
        raise ValueError(f"claim uid {claim_uid!r}: not usable in a file name")
    return Path(cdi_dir) / f"{driver}-{claim_uid}.json"


def container_edits(alloc: ContainerAllocation) -> dict[str, Any]:
    """CDI ``containerEdits`` from a device-plugin style allocation: env, bind mounts, device nodes."""
    edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in sorted(alloc.env.items())]}
    if alloc.mounts:
        edits["mounts"] = [{"hostPath": m.host_path, "containerPath": m.container_path,
                            "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "rbind"]}
                           for m in alloc.mounts]
    if alloc.devices:
        edits["deviceNodes"] = [{"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}
                                for d in alloc.devices]
    return edits


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One device entry of a spec: its CDI name and edits."""

    name: str
    edits: Mapping[str, Any] = field(default_factory=dict)


def render_spec(driver: str, devices: Sequence[CdiDevice]) -> dict[str, Any]:
    """The spec document (a CDI spec needs at least one device, each with non-empty edits)."""
    if not devices:
        raise ValueError(f"driver {driver}: a CDI spec needs at least one device")
    return {"cdiVersion": CDI_VERSION, "kind": cdi_kind(driver),
            "devices": [{"name": d.name, "containerEdits": dict(d.edits)} for d in devices]}


def write_spec(cdi_dir: str | Path, driver: str, claim_uid: str, devices: Sequence[CdiDevice]) -> Path:
    """Write (atomically replace) a claim's spec; returns its path."""
    path = spec_path(cdi_dir, driver, claim_uid)
    data = json.dumps(render_spec(driver, devices), indent=2, sort_keys=True).encode()
    atomic_write(path, data, mode=0o644)
    return path


def remove_spec(cdi_dir: str | Path, driver: str, claim_uid: str) -> bool:
    """Remove a claim's spec; False when there was none (unprepare is retried, so that is no error)."""
    try:
        spec_path(cdi_dir, driver, claim_uid).unlink()
    except FileNotFoundError:
        return False
    return True


def atomic_write(path: Path, data: bytes, *, mode: int) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never half of one, even after a crash:
    a temporary file in the same directory, fsync'd, renamed over ``path``, then the directory fsync'd."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
