"""Every query of both Grafana dashboards, evaluated by a real Prometheus scraping a real scheduler and monitor.

Prometheus (Debian's ``prometheus``; ``e2e/sysdeps.sh prometheus`` installs it, ``make e2e`` runs that first) is
started on 127.0.0.1 with a generated configuration and a temporary storage folder, scraping every second:

* the session's ``hami scheduler`` (against the real kube-apiserver), after pods went through the webhook, filter
  and bind, one that fits nowhere, and a ResourceQuota;
* an in-process ``hami monitor`` reading HAMi-core shared-region files written by the test for a bound pod's
  container, with its pods from the API server as the device plugin's ServiceAccount. NVML is the one fake: the
  host GPU series need a driver, which the test machine does not have.

Each panel's and variable's query, with Grafana's variables substituted (``$__rate_interval``, ``$node`` = All), must
return at least one series. Without prometheus the test skips, or fails under ``HAMI_E2E_REQUIRE=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboard_helpers import UUID, FakeNvml, load, panel_queries, substitute, variable_queries
from monitor_helpers import Proc as RegionProc
from monitor_helpers import write_region
from realkube.objects import gpu_pod
from realkube.procs import Proc, free_port, wait_until
from realkube.stack import Stack

from hami_core.monitor import Monitor, MonitorOptions
from hami_core.monitor.nvml import NvmlSource

pytestmark = pytest.mark.e2e

SCRAPE_S = 1
#: what Grafana's $__rate_interval comes to here: several scrapes, so that rate() has samples to work on
RATE_INTERVAL = "15s"


@pytest.fixture(scope="module")
def prometheus_bin() -> str:
    found = shutil.which("prometheus")
    if found is None:
        message = ("tests/e2e/test_prometheus.py needs Prometheus: run `e2e/sysdeps.sh prometheus` as root (Debian's "
                   "prometheus package; `make e2e` runs it) or put a prometheus binary on PATH")
        if os.environ.get("HAMI_E2E_REQUIRE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class Prometheus:
    """Prometheus on 127.0.0.1 with a generated configuration and its own storage folder, scraping every second."""

    def __init__(self, binary: str, folder: Path, log: Path) -> None:
        self.binary, self.folder, self.log = binary, folder, log
        self.targets: dict[str, str] = {}
        self.proc: Proc | None = None
        self.base = ""

    def start(self) -> str:
        jobs = [{"job_name": job, "scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s",
                 "static_configs": [{"targets": [address]}]} for job, address in sorted(self.targets.items())]
        config = self.folder / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": f"{SCRAPE_S}s"}, "scrape_configs": jobs}))
        port = free_port()
        argv = [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"]
        self.proc = Proc("prometheus", argv, self.log, cwd=self.folder)
        self.base = f"http://127.0.0.1:{port}"
        wait_until("prometheus ready", self._ready, 60, 0.2, proc=self.proc)
        return self.base

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc = None


@pytest.fixture
def prometheus(prometheus_bin: str, stack: Stack, tmp_path: Path) -> Iterator[Prometheus]:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    server = Prometheus(prometheus_bin, folder, stack.workdir / "logs" / "prometheus.log")
    try:
        yield server
    finally:
        server.kill()  # always, whatever the test did


@pytest.fixture
def monitor_root() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="hami-prom-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_every_dashboard_query_returns_series(stack: Stack, ns: str, make_nodes, prometheus: Prometheus,
                                               monitor_root: Path) -> None:
    assert stack.hami is not None
    nodes = make_nodes(2, "prom", gpus=2)
    core = stack.plane.core()
    core.create_namespaced_resource_quota(ns, {"apiVersion": "v1", "kind": "ResourceQuota",
                                               "metadata": {"name": "gpu"},
                                               "spec": {"hard": {"limits.nvidia.com/gpumem": str(2 * 10**7)}}})
    stack.create_pods(ns, [gpu_pod(f"p{i}", namespace=ns, mem=4000, cores=20) for i in range(3)])
    bound = stack.wait_bound(ns, 3, 120)
    stack.create_pods(ns, [gpu_pod("huge", namespace=ns, mem=10**7)])  # fits nowhere: per-node reasons counted
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException, match="exceeding resource quota"):  # a quota denial, for the denials panel
        stack.create_pods(ns, [gpu_pod("greedy", namespace=ns, mem=3 * 10**7)])
    wait_until("an unschedulable filter on hami's metrics",
               lambda: stack.hami_metrics().get("hami_scheduler_filter_node_failures_total"), 60, 0.5)

    # the monitor of the node where p0 runs, reading a shared region of p0's container
    first = next(p for p in bound if p["metadata"]["name"] == "p0")
    node = first["spec"]["nodeName"]
    assert node in nodes
    write_region(monitor_root, first["metadata"]["uid"], "main", uuids=[UUID], limits=[4000 << 20],
                 procs=[RegionProc(used={0: (1 << 20, 2 << 20, 300 << 20, 0, 400 << 20)}, util={0: (0, 0, 35)})],
                 last_kernel_time=int(time.time()) - 5)
    monitor = Monitor(MonitorOptions(containers_dir=str(monitor_root), host="127.0.0.1", port=0, node_name=node,
                                     feedback=False, interval_s=3600.0), stack.device_cluster(),
                      NvmlSource(FakeNvml()))
    monitor.start()
    try:
        prometheus.targets["hami-scheduler"] = f"127.0.0.1:{stack.hami.metrics_port}"
        prometheus.targets["hami-monitor"] = f"127.0.0.1:{monitor.port}"
        base = prometheus.start()

        def all_up() -> bool:
            active = _get(f"{base}/api/v1/targets")["data"]["activeTargets"]
            return len(active) == 2 and all(t["health"] == "up" for t in active)

        wait_until("both targets scraped", all_up, 60, 0.5)
        queries = [(f"{dash} / {title}", substitute(expr, rate_interval=RATE_INTERVAL))
                   for dash in ("hami-scheduler.json", "hami-monitor.json")
                   for title, expr in panel_queries(load(dash))]
        variables = [(f"{dash} / ${name}", substitute(selector), label)
                     for dash in ("hami-scheduler.json", "hami-monitor.json")
                     for name, selector, label in variable_queries(load(dash))]
        assert len(queries) > 40

        def empty() -> list[str]:
            missing = [what for what, expr in queries if not _query(base, expr)]
            for what, selector, label in variables:  # label_values(): the label must have a value
                if not [r for r in _query(base, f"group by ({label}) ({selector})") if r["metric"].get(label)]:
                    missing.append(what)
            return missing

        # rate() needs two scrapes inside its window: bounded wait, then name whatever is still empty
        deadline = time.monotonic() + 60
        missing = empty()
        while missing and time.monotonic() < deadline:
            time.sleep(1)
            missing = empty()
        assert not missing, "dashboard queries with no series:\n" + "\n".join(missing)

        # and they mean what they chart: three binds went through, the monitor's node is the picker's only value
        binds = _query(base, 'sum(hami_scheduler_bind_total{result="success",reason="bound"})')
        assert float(binds[0]["value"][1]) >= 3
        picked = _query(base, "group by (node) (hami_monitor_containers)")
        assert [r["metric"]["node"] for r in picked] == [node]
    finally:
        monitor.stop()
