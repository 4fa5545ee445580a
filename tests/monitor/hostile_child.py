"""Run by tests/monitor/test_hostile.py in a child process: the monitor's scrape and feedback loop over a containers
dir whose ``victim`` container truncates its cache file, so that a SIGBUS kills only this child, never pytest.

    python hostile_child.py ROOT race SECONDS      scrape and run feedback for SECONDS while the parent truncates
    python hostile_child.py ROOT after-check 0     truncate the victim's file right after each size check

Prints one JSON line: how many scrapes ran and in how many the ``good`` container was exported.
"""

from __future__ import annotations

import json
import os
import sys
import time

from prometheus_client import CollectorRegistry

from hami_core.monitor.collector import MonitorCollector
from hami_core.monitor.exposition import render_text
from hami_core.monitor.feedback import observe
from hami_core.monitor.region import RegionFile
from hami_core.monitor.store import ContainerStore


def main(root: str, mode: str, seconds: float) -> int:
    victim = os.path.join(root, "victim_c")
    if mode == "after-check":
        # The worst moment for a truncation: just after the reader made sure the file was long enough.
        original = RegionFile.check

        def check_then_truncate(self: RegionFile) -> None:
            original(self)
            if self.path.startswith(victim):
                os.truncate(self.path, 0)

        RegionFile.check = check_then_truncate  # type: ignore[method-assign]
    store = ContainerStore(root)
    registry = CollectorRegistry()
    registry.register(MonitorCollector(store))
    scrapes = good = 0
    deadline = time.monotonic() + seconds
    while True:
        text = render_text(registry).decode()
        observe(e.region for e in store)
        scrapes += 1
        good += 'pod="good",container="c"' in text
        if time.monotonic() >= deadline:
            break
    print(json.dumps({"scrapes": scrapes, "good": good}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
