"""The kubelet plugin's record of prepared claims, on disk so a restarted plugin answers a retry the same way.

One JSON file (mode 0600), written atomically::

    {"version": 1, "checksum": "<sha256 of the canonical entries JSON>", "entries": {<claim uid>: {...}}}

An entry is what :class:`PreparedClaim` holds: the claim's namespace and name, the CDI spec file, and the devices
returned to kubelet. A file whose version is unknown or whose checksum does not match (a torn or hand-edited
file) is refused with :class:`CheckpointError` naming the file, rather than trusted: the plugin then fails to
start instead of handing out another claim's devices.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hami_core.dra.cdi import atomic_write
from hami_core.plugins.errors import HamiError

__all__ = ["VERSION", "Checkpoint", "CheckpointError", "PreparedClaim", "PreparedDevice"]

VERSION = 1
FILE_NAME = "checkpoint.json"


class CheckpointError(HamiError):
    """The checkpoint file cannot be read back (bad JSON, unknown version, checksum mismatch)."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device handed to kubelet for a claim (the wire ``Device`` message)."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str = ""


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    spec_path: str
    devices: tuple[PreparedDevice, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreparedClaim:
        devices = tuple(PreparedDevice(request_names=tuple(d["request_names"]), pool_name=d["pool_name"],
                                       device_name=d["device_name"], cdi_device_ids=tuple(d["cdi_device_ids"]),
                                       share_id=d.get("share_id", "")) for d in data.get("devices") or ())
        return cls(namespace=data["namespace"], name=data["name"], uid=data["uid"], spec_path=data["spec_path"],
                   devices=devices)


def _checksum(entries: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Checkpoint:
    """The prepared claims, by UID; every change is written through before it returns (thread-safe)."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self._lock = threading.Lock()
        self._entries: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {self.path}: not JSON ({exc})") from None
        if doc.get("version") != VERSION:
            raise CheckpointError(f"checkpoint {self.path}: version {doc.get('version')!r}, expected {VERSION}")
        entries = doc.get("entries")
        if not isinstance(entries, dict) or doc.get("checksum") != _checksum(entries):
            raise CheckpointError(f"checkpoint {self.path}: checksum does not match its entries")
        try:
            return {uid: PreparedClaim.from_json(e) for uid, e in entries.items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"checkpoint {self.path}: malformed entry ({exc!r})") from None

    def _save(self) -> None:
        entries = {uid: c.to_json() for uid, c in sorted(self._entries.items())}
        doc = {"version": VERSION, "checksum": _checksum(entries), "entries": entries}
        atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True).encode(), mode=0o600)

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._entries.get(uid)

    def put(self, claim: PreparedClaim) -> None:
        with self._lock:
            self._entries[claim.uid] = claim
            self._save()

    def remove(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            claim = self._entries.pop(uid, None)
            if claim is not None:
                self._save()
            return claim

    def claims(self) -> dict[str, PreparedClaim]:
        with self._lock:
            return dict(self._entries)
