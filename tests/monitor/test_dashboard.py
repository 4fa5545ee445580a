"""The Grafana dashboards parse, follow one datasource convention, and query only metrics that the monitor and the
scheduler really export: each is run here and scraped, and every metric name a panel or variable reads must be on
one of those pages (or documented, for the few that need hardware the tests fake)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_helpers import UUID, FakeNvml, load, metric_names, panel_queries, variable_queries
from monitor_helpers import Proc, pod, scrape, write_region
from sched_helpers import gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.monitor.nvml import NvmlSource
from hami_core.scheduler.app import Options, Scheduler

ROOT = Path(__file__).resolve().parents[2]
DOCS = {"hami-monitor.json": ROOT / "docs" / "monitor.md", "hami-scheduler.json": ROOT / "docs" / "scheduler.md"}
DASHBOARDS = sorted(DOCS)


def _names(pages: list[dict[str, list[object]]]) -> set[str]:
    """Family names on scraped pages (histogram and counter samples under their own and their family's names)."""
    out: set[str] = set()
    for page in pages:
        for sample in page:
            out.add(sample)
            out.add(re.sub(r"_(bucket|sum|count|total|created)$", "", sample))
    return out


@pytest.fixture(scope="module")
def scheduler_names() -> Iterator[set[str]]:
    """Everything a scheduler exports, with and without --metrics-device-detail, after a filter and a bind."""
    pages = []
    for detail in (False, True):
        quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": "default"},
                 "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}}}
        cluster = MemoryCluster(nodes=[nvidia_node("node-a")], quotas=[quota])
        svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host="127.0.0.1",
                                                        metrics_port=0, sync_wait_s=2.0,
                                                        metrics_device_detail=detail))
        svc.start()
        try:
            p = cluster.add_pod(gpu_pod("p", mem=1000))
            assert post(svc.server.url + "/filter", {"Pod": p, "NodeNames": ["node-a"]})[2]["NodeNames"]
            bind = {"PodName": "p", "PodNamespace": "default", "PodUID": p["metadata"]["uid"], "Node": "node-a"}
            assert post(svc.server.url + "/bind", bind)[2] == {"Error": ""}
            huge = cluster.add_pod(gpu_pod("huge", mem=10**6))  # unschedulable: the per-node reasons are counted
            assert post(svc.server.url + "/filter", {"Pod": huge, "NodeNames": ["node-a"]})[2]["FailedNodes"]
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": "u", "operation": "CREATE", "object": gpu_pod("w", mem=1000)}}
            assert post(svc.server.url + "/webhook", review)[2]["response"]["allowed"]
            assert svc.metrics_url is not None
            pages.append(scrape(svc.metrics_url))
        finally:
            svc.stop()
    yield _names(pages)


@pytest.fixture
def monitor_names(root: Path, start_monitor) -> set[str]:
    write_region(root, "uid-a", "main", uuids=[UUID], limits=[1 << 30], last_kernel_time=1,
                 procs=[Proc(used={0: (1, 2, 3, 0, 10)}, util={0: (0, 0, 5)})])
    m = start_monitor(MemoryCluster(pods=[pod("a", "uid-a", ["main"])]), NvmlSource(FakeNvml()), feedback=False)
    return _names([scrape(m.url)])


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_shape_and_datasource_convention(name: str) -> None:
    dash = load(name)
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    ds = dash["templating"]["list"][0]
    assert (ds["name"], ds["type"], ds["query"]) == ("DS_PROMETHEUS", "datasource", "prometheus")
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] == name.removesuffix(".json")
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert g["x"] + g["w"] <= 24 and not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
            assert p["targets"] and all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]
    for v in dash["templating"]["list"][1:]:
        assert v["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, v["name"]


def test_scheduler_dashboard_reads_only_what_the_scheduler_exports(scheduler_names: set[str]) -> None:
    dash = load("hami-scheduler.json")
    used = {m for _, e in panel_queries(dash) for m in metric_names(e)}
    used |= {m for _, selector, _ in variable_queries(dash) for m in metric_names(selector)}
    assert len(used) > 20 and used <= scheduler_names, sorted(used - scheduler_names)
    # the request series, the lock series and the per-node / per-device allocation are all charted
    assert {"hami_scheduler_filter_total", "hami_scheduler_bind_duration_seconds_bucket",
            "hami_scheduler_webhook_total", "hami_scheduler_denials_total", "hami_node_lock_waiting",
            "hami_node_quarantined", "hami_resource_quota_used", "hami_node_device_memory_allocated_bytes",
            "hami_gpu_memory_allocated_bytes"} <= used


def test_monitor_dashboard_reads_only_what_the_monitor_and_scheduler_export(
        monitor_names: set[str], scheduler_names: set[str]) -> None:
    dash = load("hami-monitor.json")
    used = {m for _, e in panel_queries(dash) for m in metric_names(e)}
    used |= {m for _, selector, _ in variable_queries(dash) for m in metric_names(selector)}
    assert used and used <= monitor_names | scheduler_names, sorted(used - monitor_names - scheduler_names)


def test_the_monitor_node_picker_lists_nodes_without_nvml_or_gpu_pods(start_monitor) -> None:
    """A node with no driver and no GPU pod still shows in the picker: its metric does not come from NVML."""
    [(_, selector, label)] = [v for v in variable_queries(load("hami-monitor.json")) if v[0] == "node"]
    m = start_monitor(None)  # NVML unavailable, no containers
    samples = scrape(m.url)[selector]
    assert [labels[label] for labels, _ in samples] == ["node-a"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_metrics_are_documented(name: str) -> None:
    dash = load(name)
    used = {m for _, e in panel_queries(dash) for m in metric_names(e) if m.startswith("hami_")}
    documented = {re.sub(r"_(bucket|sum|count)$", "", m) for path in DOCS.values()
                  for m in re.findall(r"`(hami_[a-z_]+)", path.read_text())}
    missing = {m for m in used if re.sub(r"_(bucket|sum|count)$", "", m) not in documented}
    assert used and not missing, sorted(missing)
