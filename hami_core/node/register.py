"""The node registration writer (spec node.md §2.5): the vendor's devices as a JSON annotation on the Node.

Unlike HAMi's Go loop, devices are sorted (by index, then id) so the string is stable, and the last
written string is remembered only after the patch succeeded, so a failed patch is retried next pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from hami_core.cluster.base import Cluster
from hami_core.plugins.types import DeviceInfo
from hami_core.wire.nodes import encode_node_devices_json

log = logging.getLogger("hami.node.register")

SUCCESS_INTERVAL_S = 30.0
ERROR_INTERVAL_S = 5.0


class RegistrationWriter:
    """Writes ``annotation`` on ``node_name`` when the encoded device list changes."""

    def __init__(self, cluster: Cluster, node_name: str, annotation: str) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.annotation = annotation
        self.last_written: str | None = None

    @staticmethod
    def encode(devices: Sequence[DeviceInfo]) -> str:
        return encode_node_devices_json(sorted(devices, key=lambda d: (d.index, d.id)))

    def write(self, devices: Sequence[DeviceInfo]) -> bool:
        """Patch the node if the value changed; True if a patch was sent. Patch errors propagate."""
        value = self.encode(devices)
        if value == self.last_written:
            return False
        self.cluster.patch_node(self.node_name, {"metadata": {"annotations": {self.annotation: value}}})
        self.last_written = value
        log.info("node %s: %s updated (%d devices)", self.node_name, self.annotation, len(devices))
        return True

    def run(self, devices: Callable[[], Sequence[DeviceInfo]], stop: threading.Event, *,
            interval_s: float = SUCCESS_INTERVAL_S, error_interval_s: float = ERROR_INTERVAL_S,
            wake: threading.Event | None = None) -> None:
        """Loop until ``stop``: write, then wait ``interval_s`` (``error_interval_s`` after an error) or until
        ``wake`` is set (a device's health changed: the scheduler must not wait 30 s to stop using it)."""
        wake = wake if wake is not None else stop
        while not stop.is_set():
            try:
                self.write(devices())
                wait = interval_s
            except Exception as exc:
                log.warning("node %s: cannot write %s: %s", self.node_name, self.annotation, exc)
                wait = error_interval_s
            wake.wait(wait)
            if wake is not stop:
                wake.clear()
