"""The extender inside the real kube-scheduler (``make bench-e2e``): pods per second and latency from creation to
bound, on a real kube-apiserver, etcd and kube-scheduler built by ``make e2e-bin``.

One control plane per node count; on it, one mode after the other:

* ``alone``: kube-scheduler without any extender, pods asking a whole GPU as the ``nvidia.com/gpu`` extended
  resource (what a cluster without HAMi does);
* ``null-extender``: kube-scheduler calling ``benchmarks/null_extender.py`` (its ``/filter`` answers the first
  candidate, no bind verb): the floor of any HTTP extender;
* ``hami``: kube-scheduler calling ``hami scheduler`` (the shipped KubeSchedulerConfiguration, binpack),
  fractional requests (``nvidia.com/gpumem`` / ``gpucores``), and the device plugin's Allocate for every bound pod
  (hami's own Allocate code in a kubelet stand-in process, which releases the node lock as on a node);
* ``hami-bind-write``: the same with ``--write-allocation bind``;
* ``dra``: the same fractional pods in DRA mode (issue 30): hami's webhook (``--device-mode dra``) turns each into
  a ResourceClaimTemplate, kube-controller-manager's resourceclaim controller makes the claims, and kube-scheduler
  with no extender allocates them with its own DRA allocator from the ResourceSlices ``hami dra-driver`` would
  publish for each node's GPUs (written by the benchmark from the nodes' registrations, as ``hami dra-driver
  --dry-run`` prints them; publishing is not on the measured path). The claims exist before the clock starts,
  as the pods do in every mode.

How a mode is measured: its M pods are created first, naming a scheduler that is not running yet; then its
kube-scheduler starts, and the clock starts when it takes the leader Lease (it schedules from then on), so the
burst is "created at once" at that instant and one Python client's creation rate does not cap the figures.
A pod is bound when the benchmark's own watch first sees its ``spec.nodeName``. pods/s = M / (last bound - start);
p50/p99 = time from the start to each pod's binding. Each component runs in its own process; every client (kube-
scheduler's and hami's) gets the same QPS (``--qps``, 5,000 by default as in upstream's scheduler_perf), so the
client-side rate limiter is not what is measured. Per mode the benchmark also records the API requests per pod
(kube-apiserver's ``apiserver_request_total``) and the CPU seconds each process used (``/proc``), which say what
limits the throughput.

Run: ``make bench-e2e`` (``BENCH_ARGS="--nodes 100,500,1000 --pods 1000 --json"``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from realkube.controlplane import ControlPlane, KubeControllerManager, KubeScheduler, binaries  # noqa: E402
from realkube.hami import HamiScheduler, scheduler_config  # noqa: E402
from realkube.objects import create_node, gpu_pod  # noqa: E402
from realkube.procs import Proc, free_port, wait_until  # noqa: E402
from realkube.stack import Stack  # noqa: E402

MODES = ("alone", "null-extender", "hami", "hami-bind-write", "dra")
PREFIX = "bench-"
PROFILES = {"alone": "bench-alone", "null-extender": "bench-null", "hami": "hami-scheduler",
            "hami-bind-write": "hami-scheduler", "dra": "bench-dra"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------- measurement
def cpu_seconds(pid: int) -> float:
    """user + system CPU of a process and its reaped children (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK


def api_requests(plane: ControlPlane) -> Counter[tuple[str, str]]:
    """kube-apiserver's ``apiserver_request_total`` by (verb, resource[/subresource]), watches left out."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(plane.apiserver.get_text("/metrics")):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            if labels.get("verb") == "WATCH":
                continue
            resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            out[(labels.get("verb", ""), resource)] += int(sample.value)
    return out


class BoundWatch:
    """Watches one namespace's pods and records when each one's ``spec.nodeName`` first appears."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}  # pod -> the node it was bound to
        self._stop = threading.Event()
        self._resp: Any = None
        core = plane.core()
        resp = core.list_namespaced_pod(namespace, _preload_content=False)
        listing = json.loads(resp.data)
        for pod in listing["items"]:
            if pod["spec"].get("nodeName"):
                self.bound[pod["metadata"]["name"]] = time.time()
        self._rv = listing["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name="bound-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        core = self.plane.core()
        while not self._stop.is_set():
            try:
                resp = core.list_namespaced_pod(self.namespace, watch=True, resource_version=self._rv,
                                                allow_watch_bookmarks=True, timeout_seconds=600,
                                                _preload_content=False, _request_timeout=(10, 700))
                self._resp = resp
                buffer = b""
                for chunk in resp.stream(256 * 1024):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        self._line(line, time.time())
            except Exception:
                if not self._stop.is_set():
                    time.sleep(0.1)

    def _line(self, line: bytes, now: float) -> None:
        if not line.strip():
            return
        event = json.loads(line)
        obj = event.get("object") or {}
        self._rv = (obj.get("metadata") or {}).get("resourceVersion") or self._rv
        name = (obj.get("metadata") or {}).get("name")
        if (event.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName")
                and name not in self.bound):
            self.bound[name] = now
            self.nodes[name] = obj["spec"]["nodeName"]

    def close(self) -> None:
        self._stop.set()
        if self._resp is not None:
            with suppress(Exception):
                self._resp.shutdown()


def lease_acquired(plane: ControlPlane, identity_prefix: str = "") -> tuple[str, float] | None:
    """(holder, acquireTime as a UNIX time) of the Lease hami-scheduler, once held."""
    from kubernetes import client

    try:
        lease = client.CoordinationV1Api(plane.admin).read_namespaced_lease("hami-scheduler", "kube-system",
                                                                           _preload_content=False)
    except Exception:
        return None
    spec = json.loads(lease.data).get("spec") or {}
    holder, acquired = spec.get("holderIdentity") or "", spec.get("acquireTime")
    if not holder or not acquired or not holder.startswith(identity_prefix):
        return None
    return holder, datetime.fromisoformat(acquired.replace("Z", "+00:00")).timestamp()


# ------------------------------------------------------------------------------------------- the run
def pods_for(mode: str, namespace: str, count: int, seed: int) -> list[dict[str, Any]]:
    scheduler = PROFILES[mode]
    if mode in ("alone", "null-extender"):
        return [gpu_pod(f"p-{i:05d}", namespace=namespace, scheduler=scheduler) for i in range(count)]
    rng = random.Random(seed)
    return [gpu_pod(f"p-{i:05d}", namespace=namespace, scheduler=scheduler,
                    mem=rng.choice([2000, 4000, 8000, 12000, 20000]), cores=rng.choice([0, 10, 20, 30]))
            for i in range(count)]


def scheduler_config_for(mode: str, extender_url: str | None, ca: bytes, qps: int) -> dict[str, Any]:
    overrides = {"clientConnection": {"qps": qps, "burst": qps}}
    if mode in ("alone", "dra"):
        config = scheduler_config(None, None, overrides=overrides)
    elif mode == "null-extender":
        config = scheduler_config(None, None, overrides=overrides)
        config["extenders"] = [{"urlPrefix": extender_url, "filterVerb": "filter", "nodeCacheCapable": True,
                                "weight": 1, "httpTimeout": "30s"}]
    else:
        config = scheduler_config(extender_url, ca, overrides=overrides)
    config["profiles"] = [{**config["profiles"][0], "schedulerName": PROFILES[mode]}]
    return config


class Run:
    """One node count: its control plane, nodes and the kubelet stand-in."""

    def __init__(self, bindir: Path, workdir: Path, nodes: int, pods: int, qps: int, seed: int,
                 progress: Callable[[str], None], profile_s: int = 0) -> None:
        self.bindir, self.workdir, self.nodes, self.pods, self.qps, self.seed = bindir, workdir, nodes, pods, qps, seed
        self.say = progress
        self.profile_s = profile_s
        self.hami_flags: dict[str, str | None] = {}

    @contextmanager
    def cluster(self) -> Iterator[Stack]:
        extra = ["--profiling=true"] if self.profile_s else []
        with ControlPlane(self.bindir, self.workdir, audit=False, apiserver_args=extra) as plane:
            stack = Stack(plane, self.bindir)
            stack.install()
            self.say(f"{self.nodes} nodes x 8 GPUs")
            core = plane.core()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda i: create_node(core, f"{PREFIX}{i:05d}", gpus=8), range(self.nodes)))
            kubelet = Proc("kubelet-sim", [sys.executable, str(ROOT / "tests/e2e/realkube/kubelet_main.py"),
                                           f"--watch-kubeconfig={plane.apiserver.admin_kubeconfig}",
                                           f"--device-kubeconfig={stack.device_kubeconfig}", f"--prefix={PREFIX}"],
                           self.workdir / "logs" / "kubelet-sim.log")
            self.kubelet = kubelet
            try:
                yield stack
            finally:
                kubelet.stop()

    def publish_dra(self, stack: Stack) -> None:
        """The NVIDIA DeviceClass and every node's ResourceSlices, as ``hami dra-driver`` publishes them (once)."""
        if getattr(self, "_published", False):
            return
        from kubernetes import client

        from hami_core.dra.deviceclass import device_class
        from hami_core.dra.driver import node_slices
        from hami_core.engine.config import load_config
        from hami_core.plugins.manager import get_plugin_manager

        config = load_config(str(stack.install_from.device_config))
        pm = get_plugin_manager(blocked=config.blocked_plugins)
        backends = [b for b in pm.backends(config.devices) if b.vendor == "nvidia"]
        api = client.ResourceV1Api(stack.plane.admin)
        api.create_device_class(device_class("NVIDIA"), _preload_content=False)
        core = stack.plane.core()

        def publish(i: int) -> None:
            node = json.loads(core.read_node(f"{PREFIX}{i:05d}", _preload_content=False).data)
            for item in node_slices(pm, backends, node):
                item["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "controller": True,
                                                        "name": node["metadata"]["name"],
                                                        "uid": node["metadata"]["uid"]}]
                api.create_resource_slice(item, _preload_content=False)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(publish, range(self.nodes)))
        self._published = True

    def _profile(self, plane: ControlPlane, mode: str) -> None:
        """kube-apiserver's CPU profile over ``profile_s`` seconds of the run (``go tool pprof -top FILE``)."""
        import urllib.request

        url = f"{plane.apiserver.url}/debug/pprof/profile?seconds={self.profile_s}"
        with urllib.request.urlopen(url, timeout=self.profile_s + 30, context=plane.apiserver.ssl_context()) as r:
            path = self.workdir / f"kube-apiserver-{mode}.pprof"
            path.write_bytes(r.read())
        self.say(f"{mode}: kube-apiserver CPU profile in {path}")

    def mode(self, stack: Stack, mode: str) -> dict[str, Any]:
        plane = stack.plane
        namespace = f"bench-{mode}"
        plane.ensure_namespace(namespace)
        extender: Any = None
        url = None
        if mode == "null-extender":
            port = free_port()
            extender = Proc("null-extender", [sys.executable, str(ROOT / "benchmarks/null_extender.py"),
                                              f"--port={port}"], self.workdir / "logs" / "null-extender.log")
            url = f"http://127.0.0.1:{port}"
            wait_until("null extender", lambda: "null extender on" in extender.log.read_text(), 30, proc=extender)
        elif mode.startswith("hami"):
            extra: dict[str, str | None] = {"--leader-elect": None, "--kube-qps": str(self.qps),
                                            "--kube-burst": str(self.qps), "--node-scheduler-policy": "binpack",
                                            "--log-level": "WARNING", **self.hami_flags}
            if mode == "hami-bind-write":
                extra["--write-allocation"] = "bind"
            hami = HamiScheduler(self.workdir, plane.ca, stack.scheduler_kubeconfig, name=f"hami-{mode}", extra=extra)
            hami.start(timeout_s=300)
            stack.hami = hami
            stack.wait_hami_nodes([f"{PREFIX}{i:05d}" for i in range(self.nodes)], timeout_s=300)
            extender, url = hami, hami.url
        elif mode == "dra":
            self.publish_dra(stack)
            kcm = KubeControllerManager(self.bindir, self.workdir, plane.apiserver.admin_kubeconfig,
                                        controllers=("resourceclaim-controller",)).start()
            # the webhook only: kube-scheduler does not call hami in DRA mode
            webhook = HamiScheduler(self.workdir, plane.ca, stack.scheduler_kubeconfig, name="hami-dra-webhook",
                                    extra={"--leader-elect": None, "--device-mode": "dra", "--log-level": "WARNING",
                                           "--kube-qps": str(self.qps), "--kube-burst": str(self.qps)})
            webhook.start(timeout_s=300)
            stack.hami = webhook
            stack.register_webhook()
        self.say(f"{mode}: creating {self.pods} pods")
        core = plane.core()
        pods = pods_for(mode, namespace, self.pods, self.seed)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda p: core.create_namespaced_pod(namespace, p, _preload_content=False), pods))
        if mode == "dra":
            from kubernetes import client

            resource = client.ResourceV1Api(plane.admin)
            wait_until(f"{mode}: {self.pods} claims made", lambda: len(json.loads(
                resource.list_namespaced_resource_claim(namespace, _preload_content=False).data)["items"])
                >= self.pods, 300, 0.5)
        watch = BoundWatch(plane, namespace)
        before_api = api_requests(plane)
        config = scheduler_config_for(mode, url, plane.ca.pem, self.qps)
        scheduler = KubeScheduler(self.bindir, self.workdir, f"kube-scheduler-{mode}", config,
                                  stack.scheduler_kubeconfig)
        procs = {"kube-apiserver": plane.apiserver.proc, "etcd": plane.etcd.proc, "kubelet-sim": self.kubelet}
        if extender is not None:
            procs[mode] = extender if isinstance(extender, Proc) else extender.proc
        cpu_before = {name: cpu_seconds(p.pid) for name, p in procs.items() if p is not None}
        previous = lease_acquired(plane)
        try:
            scheduler.start()
            assert scheduler.proc is not None
            procs["kube-scheduler"] = scheduler.proc
            cpu_before["kube-scheduler"] = 0.0

            def acquired() -> tuple[str, float] | None:
                now = lease_acquired(plane)
                return now if now is not None and now != previous else None

            _, start = wait_until(f"{mode}: kube-scheduler leads", acquired, 60, 0.05)  # type: ignore[misc]
            self.say(f"{mode}: scheduling")
            if self.profile_s:
                threading.Thread(target=self._profile, args=(plane, mode), daemon=True).start()
            wait_until(f"{mode}: {self.pods} pods bound", lambda: len(watch.bound) >= self.pods,
                       max(300, self.pods * 2), 0.2, proc=scheduler.proc)
            cpu = {name: round(cpu_seconds(p.pid) - cpu_before.get(name, 0.0), 2) for name, p in procs.items()
                   if p is not None}
        finally:
            watch.close()
            scheduler.stop()
            if extender is not None:
                extender.stop()
            if mode == "dra":
                from kubernetes import client as kclient

                kclient.AdmissionregistrationV1Api(plane.admin).delete_mutating_webhook_configuration(
                    "hami-webhook", _preload_content=False)
                webhook.stop()
                kcm.stop()
        after_api = api_requests(plane)
        calls = {f"{verb} {res}": round((after_api[(verb, res)] - before_api.get((verb, res), 0)) / self.pods, 2)
                 for verb, res in after_api if after_api[(verb, res)] - before_api.get((verb, res), 0) > 0}
        latencies = sorted(max(0.0, t - start) * 1000 for t in watch.bound.values())
        last = max(watch.bound.values())
        result = {"mode": mode, "nodes": self.nodes, "pods": self.pods,
                  "pods_per_s": round(self.pods / max(1e-9, last - start), 1),
                  "p50_ms": round(statistics.median(latencies), 1),
                  "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1)}
        detail = {**result, "api_requests_per_pod": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
                  "cpu_s": cpu, "nodes_used": len(set(watch.nodes.values()))}
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _preload_content=False)
        wait_until(f"{mode}: pods deleted", lambda: not json.loads(core.list_namespaced_pod(
            namespace, _preload_content=False).data)["items"], 120, 0.5)
        self.say(f"{mode}: {result['pods_per_s']} pods/s, p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms")
        return detail


def run(bindir: Path, node_counts: Sequence[int], pods: int, modes: Sequence[str], qps: int, seed: int,
        progress: Callable[[str], None], keep: Path | None = None, profile_s: int = 0,
        hami_flags: dict[str, str | None] | None = None) -> dict[str, Any]:
    runs, details = [], []
    for nodes in node_counts:
        workdir = Path(tempfile.mkdtemp(prefix=f"bench-e2e-{nodes}-", dir=keep))
        r = Run(bindir, workdir, nodes, pods, qps, seed, progress, profile_s)
        r.hami_flags = dict(hami_flags or {})
        with r.cluster() as stack:
            for mode in modes:
                d = r.mode(stack, mode)
                details.append(d)
                runs.append({k: d[k] for k in ("mode", "nodes", "pods", "pods_per_s", "p50_ms", "p99_ms")})
    return {"runs": runs, "meta": {"qps": qps, "seed": seed, "details": details, "cpus": os.cpu_count(),
                                   "loadavg": os.getloadavg()}}


def table(result: dict[str, Any]) -> Table:
    t = Table(title="the extender inside the real kube-scheduler (creation to bound)")
    for col in ("mode", "nodes", "pods", "pods/s", "of alone", "p50 ms", "p99 ms", "API calls/pod", "CPU s"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    alone = {d["nodes"]: d["pods_per_s"] for d in result["meta"]["details"] if d["mode"] == "alone"}
    for d in result["meta"]["details"]:
        ratio = f"{d['pods_per_s'] / alone[d['nodes']]:.2f}" if d["nodes"] in alone else ""
        cpu = ", ".join(f"{k} {v:g}" for k, v in sorted(d["cpu_s"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
        t.add_row(d["mode"], str(d["nodes"]), str(d["pods"]), f"{d['pods_per_s']:g}", ratio, f"{d['p50_ms']:g}",
                  f"{d['p99_ms']:g}", f"{sum(d['api_requests_per_pod'].values()):.1f}", cpu)
    return t


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="500", help="node counts, comma-separated (default: 500)")
    parser.add_argument("--pods", type=int, default=1000, help="pods per mode (default: 1000)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--qps", type=int, default=5000, help="client QPS and burst of kube-scheduler and hami")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--hami-flag", action="append", default=[], metavar="--FLAG=VALUE",
                        help="an extra flag for hami scheduler in the hami modes (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--keep", metavar="DIR", help="keep the control planes' folders (logs) under DIR")
    parser.add_argument("--profile", type=int, default=0, metavar="SECONDS",
                        help="write kube-apiserver's CPU profile of the first SECONDS of each mode (with --keep)")
    args = parser.parse_args(argv)
    bindir = binaries()
    if bindir is None:
        print("bench_e2e: needs the control-plane binaries: run `make bench-e2e` (it builds them with "
              "`make e2e-bin`) or set HAMI_E2E_BIN", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    try:
        counts = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes {args.nodes!r}: expected comma-separated integers")
    console = Console(stderr=True)
    result = run(bindir, counts, args.pods, modes, args.qps, args.seed, lambda m: console.log(m),
                 Path(args.keep) if args.keep else None, args.profile,
                 {f.split("=", 1)[0]: (f.split("=", 1)[1] if "=" in f else "") for f in args.hami_flag})
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        Console().print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
