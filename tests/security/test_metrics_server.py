"""The scheduler's ``/metrics`` under load, over real HTTP: per-device series only when asked for
(``--metrics-device-detail``; per-node sums otherwise), the engine lock held only to copy numbers, one render at a
time whatever the number of scrapers and renders spaced out when they are expensive, and the metrics server's
own limits (request deadline, header limits, connection bound)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.scheduler.metrics import EngineCollector, MetricsServer, serve_metrics

WAIT_S = 30.0


def _engine() -> Any:
    engine = make_engine()
    for name in ("node-a", "node-b"):
        engine.upsert_node(nvidia_node(name, gpus=2))
    pod = gpu_pod("run", mem=3000, cores=30)
    pod["metadata"]["annotations"] = {"hami.io/vgpu-node": "node-a",
                                      "hami.io/vgpu-devices-allocated": "GPU-node-a-0,NVIDIA,3000,30:;"}
    pod["spec"]["nodeName"] = "node-a"
    pod["status"] = {"phase": "Running"}
    engine.upsert_pod(pod)
    return engine


def _scrape(url: str) -> tuple[int, str]:
    host, _, rest = url.removeprefix("http://").partition(":")
    port, _, path = rest.partition("/")
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    try:
        conn.request("GET", "/" + path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def _samples(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


@pytest.fixture
def served() -> Iterator[list[MetricsServer]]:
    servers: list[MetricsServer] = []
    yield servers
    for server in servers:
        server.shutdown()


def test_per_device_series_are_opt_in_and_the_per_node_sums_agree(served: list[MetricsServer]) -> None:
    engine = _engine()
    served.append(plain := serve_metrics(engine, "127.0.0.1", 0))
    served.append(detail := serve_metrics(engine, "127.0.0.1", 0, device_detail=True))
    status, text = _scrape(plain.url)
    assert status == 200
    assert not _samples(text, "hami_gpu_memory_limit_bytes") and not _samples(text, "hami_vgpu_memory_allocated_bytes")
    per_node = {line.split('node="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in _samples(text, "hami_node_device_memory_allocated_bytes")}
    assert per_node == {"node-a": 3000 * 1024 * 1024, "node-b": 0.0}
    assert next(line for line in _samples(text, "hami_node_device_count") if 'node="node-a"' in line).endswith(" 2.0")
    assert _samples(text, "hami_node_quarantined") and "hami_build_info{" in text
    status, text = _scrape(detail.url)  # HAMi's names and labels, one series per GPU and per pod
    per_gpu = _samples(text, "hami_gpu_memory_allocated_bytes")
    assert len(per_gpu) == 4 and all('zone="vGPU"' in line for line in per_gpu)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in per_gpu if 'node="node-a"' in line) == per_node["node-a"]
    assert _samples(text, "hami_vgpu_memory_allocated_bytes") and not _samples(text, "hami_node_device_count")


class _WatchedLock:
    """An RLock that says whether it is held (by anyone) right now."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.held = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self.held += 1

    def __exit__(self, *_: object) -> None:
        self.held -= 1
        self._lock.release()


def test_the_engine_lock_is_held_to_copy_numbers_not_to_format_them(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _WatchedLock()
    formatted_under_lock: list[str] = []
    real = GaugeMetricFamily.add_metric

    def add_metric(self: GaugeMetricFamily, *args: Any, **kwargs: Any) -> None:
        if lock.held:
            formatted_under_lock.append(self.name)
        real(self, *args, **kwargs)

    monkeypatch.setattr(GaugeMetricFamily, "add_metric", add_metric)
    for detail in (False, True):
        families = list(EngineCollector(_engine(), lock, device_detail=detail).collect())  # type: ignore[arg-type]
        assert families and not formatted_under_lock


class _SlowCollector:
    """A collector that takes ``seconds`` and counts its calls (a big engine, in miniature)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def collect(self) -> Iterator[Any]:
        self.calls += 1
        time.sleep(self.seconds)
        family = GaugeMetricFamily("hami_test_renders", "renders so far")
        family.add_metric([], self.calls)
        yield family


def _slow_server(served: list[MetricsServer], seconds: float, **kwargs: Any) -> tuple[MetricsServer, _SlowCollector]:
    registry = CollectorRegistry()
    collector = _SlowCollector(seconds)
    registry.register(collector)  # type: ignore[arg-type]
    server = MetricsServer(registry, "127.0.0.1", 0, **kwargs)
    server.start()
    served.append(server)
    return server, collector


def test_sixteen_scrapers_at_once_cost_one_render_not_sixteen(served: list[MetricsServer]) -> None:
    server, collector = _slow_server(served, 0.3)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: _scrape(server.url), range(16)))
    assert [status for status, _ in results] == [200] * 16
    assert collector.calls <= 2, collector.calls  # the first render, and at most one for those that came after it


def test_an_expensive_render_is_not_repeated_at_once(served: list[MetricsServer]) -> None:
    server, collector = _slow_server(served, 0.05)
    first = _scrape(server.url)[1]
    assert _scrape(server.url)[1] == first and collector.calls == 1  # within 3 x 50 ms of the last: the same text
    time.sleep(0.3)
    assert _scrape(server.url)[1] != first and collector.calls == 2  # later: rendered afresh


def test_a_cheap_render_is_always_fresh(served: list[MetricsServer]) -> None:
    server, collector = _slow_server(served, 0.0)
    for expected in (1, 2, 3):
        _scrape(server.url)
        assert collector.calls == expected


def test_the_metrics_server_drops_a_trickling_client_and_bounds_headers(served: list[MetricsServer]) -> None:
    server, _ = _slow_server(served, 0.0, client_timeout_s=1.0, request_timeout_s=1.0)
    host, port = server.address
    with socket.create_connection((host, port), timeout=WAIT_S) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"a" * (70 << 10) + b"\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 431")
    with socket.create_connection((host, port), timeout=WAIT_S) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        started = time.monotonic()
        dropped = False
        while time.monotonic() - started < 30:  # a byte every 0.2 s: never silent for the idle timeout
            try:
                sock.sendall(b"X")
                time.sleep(0.2)
            except OSError:
                dropped = True
                break
        assert dropped and time.monotonic() - started < 10  # the request deadline (1 s here) cut it off
    assert _scrape(server.url)[0] == 200


def test_the_metrics_server_bounds_its_connections(served: list[MetricsServer]) -> None:
    server, _ = _slow_server(served, 0.0, max_connections=4)
    idle = [socket.create_connection(server.address, timeout=WAIT_S) for _ in range(4)]
    try:
        time.sleep(0.1)
        assert _scrape(server.url)[0] == 200  # the longest idle made room
        assert idle[0].recv(1) == b""
    finally:
        for sock in idle:
            sock.close()
