"""Fixtures: a containers dir and ``hami monitor`` serving it on 127.0.0.1 (ephemeral port)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hami_core.monitor import Monitor, MonitorOptions
from hami_core.monitor.nvml import NvmlSource


class NoNvml(NvmlSource):
    """NVML as on a machine without a driver: nothing."""

    def _init(self) -> bool:
        return False


@pytest.fixture
def root(tmp_path: Path) -> Path:
    d = tmp_path / "containers"
    d.mkdir()
    return d


@pytest.fixture
def start_monitor(root: Path) -> Iterator[Callable[..., Monitor]]:
    started: list[Monitor] = []

    def start(cluster: Any = None, nvml: NvmlSource | None = None, **options: Any) -> Monitor:
        options.setdefault("interval_s", 3600.0)  # ticks driven by the test
        options.setdefault("node_name", "node-a")
        m = Monitor(MonitorOptions(containers_dir=str(root), host="127.0.0.1", port=0, **options), cluster,
                    nvml if nvml is not None else NoNvml())
        m.start()
        started.append(m)
        return m

    yield start
    for m in started:
        m.stop()
