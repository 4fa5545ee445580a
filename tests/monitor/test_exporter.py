"""The exporter over real HTTP: every value of every metric, pods from a cluster or from dir names, legacy names,
host metrics with and without NVML, bad files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from monitor_helpers import Proc, pod, scrape, write_region

from hami_core.cluster.memory import MemoryCluster
from hami_core.monitor.nvml import NvmlSource

U0 = "GPU-00000000-1111-2222-3333-444444444444"
U1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
GIB = 1 << 30
CTR_METRICS = ["hami_vgpu_memory_used_bytes", "hami_vgpu_memory_limit_bytes", "hami_container_device_memory_bytes",
               "hami_container_device_utilization_ratio", "hami_vgpu_memory_context_bytes",
               "hami_vgpu_memory_module_bytes", "hami_vgpu_memory_buffer_bytes",
               "hami_container_last_kernel_elapsed_seconds"]


def _write_two(root: Path, last: int) -> None:
    # train: v1, two devices, two live processes; infer: v0, one device
    write_region(root, "uid-train", "main", version=1, uuids=[U0, U1], limits=[4 * GIB, 2 * GIB],
                 procs=[Proc(used={0: (10, 20, 300, 0, 1000), 1: (1, 2, 3, 4, 10)}, util={0: (0, 0, 30), 1: (0, 0, 5)}),
                        Proc(pid=7, used={0: (5, 5, 90, 0, 500)}, util={0: (0, 0, 12)})],
                 last_kernel_time=last)
    write_region(root, "uid-infer", "srv", version=0, uuids=[U0], limits=[GIB],
                 procs=[Proc(used={0: (1, 1, 1, 1, 4)}, util={0: (0, 0, 9)})])


def _by_labels(samples: list[tuple[dict[str, str], float]], *keys: str) -> dict[tuple[str, ...], float]:
    return {tuple(lab[k] for k in keys): v for lab, v in samples}


def test_scrape_with_cluster(root: Path, start_monitor) -> None:
    last = int(time.time()) - 30
    _write_two(root, last)
    write_region(root, "uid-gone", "x", uuids=[U0], limits=[GIB])          # pod unknown to the cluster
    write_region(root, "uid-train", "init", uuids=[U0], limits=[GIB])      # init container: not reported
    mig = [{"containerIndex": 1, "deviceIndex": 0, "gpuUUID": "GPU-m", "profile": "1g.10gb",
            "placement": {"start": 6, "size": 1}, "migUUID": "MIG-1", "gpuInstanceID": 13, "computeInstanceID": 0},
           {"containerIndex": 1, "deviceIndex": 1, "gpuUUID": "GPU-m", "profile": "1g.10gb",
            "placement": {"start": 5, "size": 1}}]  # not realised yet: no sample
    cluster = MemoryCluster(pods=[
        pod("train", "uid-train", ["main"], namespace="ml", init=["init"],
            annotations={"hami.io/vgpu-mig-allocations": json.dumps(mig)}),
        pod("infer", "uid-infer", ["srv"]),
        pod("elsewhere", "uid-other", ["c"], node="node-b")])
    m = start_monitor(cluster, feedback=False)
    got = scrape(m.url)

    key = ("namespace", "pod", "container", "vdevice_index", "device_uuid")
    for name in CTR_METRICS:
        assert all(lab["zone"] == "vGPU" for lab, _ in got[name]), name
    assert _by_labels(got["hami_vgpu_memory_used_bytes"], *key) == {
        ("ml", "train", "main", "0", U0): 1500, ("ml", "train", "main", "1", U1): 10,
        ("default", "infer", "srv", "0", U0): 4}
    assert _by_labels(got["hami_container_device_memory_bytes"], *key) == _by_labels(
        got["hami_vgpu_memory_used_bytes"], *key)
    assert _by_labels(got["hami_vgpu_memory_limit_bytes"], *key) == {
        ("ml", "train", "main", "0", U0): 4 * GIB, ("ml", "train", "main", "1", U1): 2 * GIB,
        ("default", "infer", "srv", "0", U0): GIB}
    assert _by_labels(got["hami_container_device_utilization_ratio"], *key) == {
        ("ml", "train", "main", "0", U0): 42, ("ml", "train", "main", "1", U1): 5,
        ("default", "infer", "srv", "0", U0): 9}
    assert _by_labels(got["hami_vgpu_memory_context_bytes"], *key) == {
        ("ml", "train", "main", "0", U0): 15, ("ml", "train", "main", "1", U1): 1,
        ("default", "infer", "srv", "0", U0): 1}
    assert _by_labels(got["hami_vgpu_memory_module_bytes"], *key) == {
        ("ml", "train", "main", "0", U0): 25, ("ml", "train", "main", "1", U1): 2,
        ("default", "infer", "srv", "0", U0): 1}
    assert _by_labels(got["hami_vgpu_memory_buffer_bytes"], *key) == {
        ("ml", "train", "main", "0", U0): 390, ("ml", "train", "main", "1", U1): 3,
        ("default", "infer", "srv", "0", U0): 1}
    # v0 has no last_kernel_time: only the v1 container reports it
    elapsed = _by_labels(got["hami_container_last_kernel_elapsed_seconds"], *key)
    assert set(elapsed) == {("ml", "train", "main", "0", U0), ("ml", "train", "main", "1", U1)}
    assert all(30 <= v < 60 for v in elapsed.values())
    assert [(lab, v) for lab, v in got["hami_mig_device_info"]] == [
        ({"namespace": "ml", "pod": "train", "container": "main", "vdevice_index": "0", "device_uuid": "GPU-m",
          "mig_uuid": "MIG-1", "profile": "1g.10gb", "gpu_instance_id": "13", "compute_instance_id": "0",
          "zone": "vGPU"}, 1)]
    [(info, one)] = got["hami_build_info"]
    assert one == 1 and "zone" not in info and set(info) == {"version", "revision", "build_date", "go_version",
                                                             "compiler", "platform"}
    assert not any(n.startswith("hami_host_") for n in got)  # no NVML here
    assert "vGPU_device_memory_usage_in_bytes" not in got


def test_scrape_without_cluster_uses_dir_names(root: Path, start_monitor) -> None:
    _write_two(root, 0)
    m = start_monitor(None, feedback=False)
    got = scrape(m.url)
    assert _by_labels(got["hami_vgpu_memory_used_bytes"], "namespace", "pod", "container", "vdevice_index") == {
        ("", "uid-train", "main", "0"): 1500, ("", "uid-train", "main", "1"): 10, ("", "uid-infer", "srv", "0"): 4}
    assert "hami_container_last_kernel_elapsed_seconds" not in got  # last_kernel_time 0: not emitted
    # a container that appears later is picked up on the next scrape
    write_region(root, "uid-new", "c", uuids=[U1], limits=[5])
    got = scrape(m.url)
    assert _by_labels(got["hami_vgpu_memory_limit_bytes"], "pod")[("uid-new",)] == 5


def test_legacy_metric_names(root: Path, start_monitor) -> None:
    last = int(time.time()) - 10
    _write_two(root, last)
    mig = [{"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-m", "profile": "1g.10gb",
            "placement": {"start": 6, "size": 1}, "migUUID": "MIG-1", "gpuInstanceID": 1, "computeInstanceID": 0}]
    cluster = MemoryCluster(pods=[pod("train", "uid-train", ["main"], namespace="ml",
                                      annotations={"hami.io/vgpu-mig-allocations": json.dumps(mig)}),
                                  pod("infer", "uid-infer", ["srv"])])
    m = start_monitor(cluster, feedback=False, legacy_metrics=True)
    got = scrape(m.url)
    key = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid")
    assert _by_labels(got["vGPU_device_memory_usage_in_bytes"], *key) == {
        ("ml", "train", "main", "0", U0): 1500, ("ml", "train", "main", "1", U1): 10,
        ("default", "infer", "srv", "0", U0): 4}
    assert _by_labels(got["vGPU_device_memory_limit_in_bytes"], *key)[("ml", "train", "main", "1", U1)] == 2 * GIB
    assert _by_labels(got["Device_utilization_desc_of_container"], *key)[("ml", "train", "main", "0", U0)] == 42
    assert set(_by_labels(got["Device_last_kernel_of_container"], *key)) == {
        ("ml", "train", "main", "0", U0), ("ml", "train", "main", "1", U1)}
    desc = _by_labels(got["Device_memory_desc_of_container"], *key, "context", "module", "data", "offset")
    assert desc == {("ml", "train", "main", "0", U0, "15", "25", "390", "1070"): 1500,
                    ("ml", "train", "main", "1", U1, "1", "2", "3", "4"): 10,
                    ("default", "infer", "srv", "0", U0, "1", "1", "1", "1"): 4}
    assert _by_labels(got["MigInfo"], *key, "instanceid") == {("ml", "train", "main", "0", "GPU-m", "MIG-1"): 1}
    assert "hami_vgpu_memory_used_bytes" in got  # new names stay


class FakeNvml:
    """Just what NvmlSource calls, as pynvml spells it."""

    def __init__(self) -> None:
        self.shut = False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return [U0.encode(), U1][h]

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        if h == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(total=141 * GIB, used=3 * GIB)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=[77, 5][h], memory=[33, 1][h])


def test_host_metrics_from_nvml(root: Path, start_monitor) -> None:
    nv = FakeNvml()
    m = start_monitor(None, NvmlSource(nv), legacy_metrics=True)
    got = scrape(m.url)
    key = ("node", "device_index", "device_uuid", "device_type")
    assert _by_labels(got["hami_host_gpu_memory_used_bytes"], *key) == {
        ("node-a", "0", U0, "NVIDIA-NVIDIA H200"): 3 * GIB}   # device 1: NOT_SUPPORTED, no sample
    assert _by_labels(got["hami_host_gpu_utilization_ratio"], *key) == {
        ("node-a", "0", U0, "NVIDIA-NVIDIA H200"): 77, ("node-a", "1", U1, "NVIDIA-NVIDIA H200"): 5}
    mcu = got["hami_host_gpu_memory_controller_utilization_ratio"]
    assert all("node" not in lab and lab["zone"] == "vGPU" for lab, _ in mcu)
    assert _by_labels(mcu, "device_index", "device_uuid") == {("0", U0): 33, ("1", U1): 1}
    lkey = ("nodeid", "deviceidx", "deviceuuid", "devicetype")
    assert _by_labels(got["HostGPUMemoryUsage"], *lkey) == {("node-a", "0", U0, "NVIDIA-NVIDIA H200"): 3 * GIB}
    assert _by_labels(got["HostCoreUtilization"], *lkey)[("node-a", "1", U1, "NVIDIA-NVIDIA H200")] == 5
    m.stop()
    assert nv.shut


def test_without_pynvml_host_metrics_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as on a machine without it
    source = NvmlSource()
    assert not source.available and source.devices() == []


def test_garbage_and_shrinking_files_never_break_a_scrape(root: Path, start_monitor) -> None:
    _write_two(root, 0)
    (root / "uid-bad_c").mkdir()
    (root / "uid-bad_c" / "x.cache").write_bytes(b"\x00garbage" * 10)
    (root / "uid-short_c").mkdir()
    (root / "uid-short_c" / "x.cache").write_bytes(b"\x4e\xf7\x2f\x01")
    m = start_monitor(None, feedback=False)
    assert set(_by_labels(scrape(m.url)["hami_vgpu_memory_used_bytes"], "pod")) == {("uid-train",), ("uid-infer",)}
    with open(root / "uid-train_main" / "1234.cache", "r+b") as f:
        f.truncate(64)
    for _ in range(2):
        got = scrape(m.url)
        assert set(_by_labels(got["hami_vgpu_memory_used_bytes"], "pod")) == {("uid-infer",)}


def test_every_node_reports_its_loaded_containers_even_without_gpus_or_nvml(root: Path, start_monitor) -> None:
    """``hami_monitor_containers{node}`` is there on a node with no GPU pod and no NVML: dashboards list nodes by it."""
    m = start_monitor(None, feedback=False)
    assert scrape(m.url)["hami_monitor_containers"] == [({"node": "node-a", "zone": "vGPU"}, 0)]
    _write_two(root, 0)
    assert scrape(m.url)["hami_monitor_containers"] == [({"node": "node-a", "zone": "vGPU"}, 2)]
