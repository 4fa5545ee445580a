"""The fast text rendering equals prometheus-client's; OpenMetrics and gzip scrapes still work."""

from __future__ import annotations

import gzip
import urllib.request
from pathlib import Path

from monitor_helpers import Proc, write_region
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hami_core.monitor.exposition import render_text

U0 = "GPU-00000000-1111-2222-3333-444444444444"


def _parsed(text: str) -> list:
    return sorted((f.name, f.type, f.documentation, sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                                                          for s in f.samples))
                  for f in text_string_to_metric_families(text))


def test_render_matches_prometheus_client(root: Path, start_monitor) -> None:
    write_region(root, "uid", 'we"ird\\name', uuids=[U0], limits=[1 << 40],
                 procs=[Proc(used={0: (1, 2, 3, 4, 3_000_000_000_123)}, util={0: (0, 0, 7)})], last_kernel_time=5)
    m = start_monitor(None, feedback=False, legacy_metrics=True)
    m.collector.clock = lambda: 1000.25  # elapsed = 995.25, a fraction
    assert _parsed(render_text(m.registry).decode()) == _parsed(generate_latest(m.registry).decode())


def test_openmetrics_and_gzip(root: Path, start_monitor) -> None:
    write_region(root, "uid", "c", uuids=[U0], limits=[9])
    m = start_monitor(None, feedback=False)
    req = urllib.request.Request(m.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        assert b"hami_vgpu_memory_limit_bytes{" in resp.read()
    req = urllib.request.Request(m.url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert b'container="c"' in gzip.decompress(resp.read())
