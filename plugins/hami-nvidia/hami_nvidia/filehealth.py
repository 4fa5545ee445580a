"""Health of fake GPUs: the ``health`` field of the devices file, re-read while the node component runs.

GPUs from ``HAMI_OVERRIDE_NVIDIA_DEVICES_FILE`` have no NVML to raise XID events, so a test cluster or a demo
could never see a device fail. Instead the file is the driver: a device whose entry says ``health: false``
is unhealthy, and editing the file (``health: true`` again, or removing the field) brings it back. The file is
polled every :data:`POLL_S` seconds and re-read only when its modification time or size changed; a file that
cannot be read or parsed keeps every device as it was (logged once per change), as a driver call that fails
must not mark a node's GPUs up or down by accident. Devices not in the file keep their state.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo
from hami_core.wire.common import parse_go_bool
from hami_nvidia.detect import devices_file_items

__all__ = ["POLL_S", "DevicesFileHealth", "file_health"]

log = logging.getLogger("hami.nvidia.health")

POLL_S = 1.0


def file_health(path: str | os.PathLike[str]) -> dict[str, bool]:
    """``{uuid: healthy}`` for every device of the devices file (``health`` defaults to true); ``ValueError``
    naming the file, the device and the field otherwise."""
    out: dict[str, bool] = {}
    for i, item in enumerate(devices_file_items(path)):
        value = item.get("health", True)
        if isinstance(value, str):
            try:
                value = parse_go_bool(value)
            except WireFormatError:
                raise ValueError(f"devices file {path}: device {i}: health: expected true or false, "
                                 f"got {value!r}") from None
        if not isinstance(value, bool):
            raise ValueError(f"devices file {path}: device {i}: health: expected true or false, got {value!r}")
        out[str(item["uuid"])] = value
    return out


class DevicesFileHealth:
    """``hami_watch_health`` for fake GPUs: reports each change of a device's ``health`` in the devices file
    through ``on_health(uuid, healthy)``, the first poll included (a device listed unhealthy at start)."""

    def __init__(self, path: str | os.PathLike[str], devices: Sequence[DeviceInfo],
                 on_health: Callable[[str, bool], None], *, poll_s: float = POLL_S) -> None:
        self.path = os.fspath(path)
        self.on_health = on_health
        self.poll_s = poll_s
        self.state = {d.id: d.health for d in devices}
        self._seen: tuple[int, int] | None = None
        self._failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        """Re-read the file if it changed and report every device whose health changed."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._fail(f"cannot stat it: {exc.strerror or exc}")
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return
        try:
            health = file_health(self.path)
        except (OSError, ValueError) as exc:
            self._fail(str(exc))
            return
        self._seen, self._failed = stamp, False
        for uuid, healthy in health.items():
            if uuid in self.state and self.state[uuid] != healthy:
                self.state[uuid] = healthy
                log.info("devices file %s: GPU %s is now %s", self.path, uuid, "healthy" if healthy else "unhealthy")
                self.on_health(uuid, healthy)

    def _fail(self, why: str) -> None:
        if not self._failed:
            log.warning("devices file %s: %s; device health unchanged until it can be read", self.path, why)
        self._failed = True
        self._seen = None

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # a callback's bug must not end the watch
                log.exception("devices file %s: health poll failed", self.path)

    def start(self) -> DevicesFileHealth:
        self.poll()
        self._thread = threading.Thread(target=self._run, name="hami-nvidia-filehealth", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.poll_s + 1)
            self._thread = None
