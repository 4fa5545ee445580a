"""Connection handling of both scheduler HTTP servers (``asyncio``, the default, and ``uvicorn``) over raw
sockets: pipelined requests, HTTP/1.0, ``Expect: 100-continue``, unsupported methods, a slow bind not holding
up other clients, a busy port, and shutdown (idle connections closed, requests in flight answered within a grace
period). The body limits and TLS are in tests/security."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sched_helpers import get, gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.aioserver import AsyncSchedulerServer
from hami_core.scheduler.app import HTTP_SERVERS, make_server
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.webhook import Webhook

WAIT_S = 30.0
REVIEW = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "request": {"uid": "u1", "object": {"metadata": {"name": "p"}}}}).encode()


class SlowBindCluster(MemoryCluster):
    """A MemoryCluster whose Binding waits until the test lets it go (an API server that is slow to answer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered = threading.Event()
        self.go = threading.Event()

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        self.entered.set()
        assert self.go.wait(WAIT_S)
        super().bind(namespace, name, uid, node, annotations)


@pytest.fixture(params=HTTP_SERVERS)
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    def start(cluster: MemoryCluster | None = None) -> Any:
        engine = make_engine()
        cluster = cluster if cluster is not None else MemoryCluster(nodes=[nvidia_node("node-a")])
        for node in cluster.list_nodes():
            engine.upsert_node(node)
        server = make_server(request.param, Extender(engine, cluster), Webhook(engine), "127.0.0.1", 0)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()


def _read_replies(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Parse ``count`` HTTP/1.1 replies (Content-Length framed) from ``sock``."""
    buf, replies = b"", []
    while len(replies) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(replies)} replies"
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        size = int(headers["content-length"])
        while len(buf) < size:
            buf += sock.recv(65536)
        replies.append((int(lines[0].split()[1]), headers, buf[:size]))
        buf = buf[size:]
    return replies


def test_pipelined_requests_are_answered_in_order(serve: Callable[..., Any]) -> None:
    server = serve()
    requests = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                + b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(REVIEW), REVIEW)
                + b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    with socket.create_connection(server.address, timeout=WAIT_S) as sock:
        sock.sendall(requests)
        (s1, _, b1), (s2, h2, b2), (s3, _, b3) = _read_replies(sock, 3)
    assert (s1, b1) == (200, b"")
    assert s2 == 200 and h2["content-type"] == "application/json" and json.loads(b2)["response"]["uid"] == "u1"
    assert (s3, b3) == (200, b"ok")


def test_http10_client_gets_its_answer_and_the_connection_closes(serve: Callable[..., Any]) -> None:
    server = serve()
    with socket.create_connection(server.address, timeout=WAIT_S) as sock:
        sock.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.split(b" ", 2)[1] == b"200" and data.endswith(b"\r\n\r\nok")


def test_expect_100_continue_is_honoured(serve: Callable[..., Any]) -> None:
    server = serve()
    with socket.create_connection(server.address, timeout=WAIT_S) as sock:
        sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                     % len(REVIEW))
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100")  # the client may now send the body
        sock.sendall(REVIEW)
        [(status, _, body)] = _read_replies(sock, 1)
    assert status == 200 and json.loads(body)["response"]["uid"] == "u1"


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_unsupported_methods_get_501(serve: Callable[..., Any], method: str) -> None:
    server = serve()
    with socket.create_connection(server.address, timeout=WAIT_S) as sock:
        sock.sendall(f"{method} /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        [(status, _, _)] = _read_replies(sock, 1)
    assert status == 501
    assert get(server.url + "/healthz")[0] == 200


def test_a_slow_bind_does_not_hold_up_other_clients(serve: Callable[..., Any]) -> None:
    cluster = SlowBindCluster(nodes=[nvidia_node("node-a")], pods=[gpu_pod("slow"), gpu_pod("quick")])
    server = serve(cluster)
    status, _, result = post(server.url + "/filter", {"Pod": cluster.get_pod("default", "slow"),
                                                      "NodeNames": ["node-a"]})
    assert status == 200 and result["NodeNames"] == ["node-a"]
    outcome: dict[str, Any] = {}
    binder = threading.Thread(target=lambda: outcome.update(bind=post(server.url + "/bind", {
        "PodName": "slow", "PodNamespace": "default", "PodUID": "uid-default-slow", "Node": "node-a"})))
    binder.start()
    try:
        assert cluster.entered.wait(WAIT_S)
        assert get(server.url + "/healthz")[0] == 200  # answered while the bind waits on the API server
        status, _, result = post(server.url + "/filter", {"Pod": cluster.get_pod("default", "quick"),
                                                          "NodeNames": ["node-a"]})
        assert status == 200 and result["NodeNames"] == ["node-a"] and not cluster.go.is_set()
    finally:
        cluster.go.set()
        binder.join(WAIT_S)
    assert outcome["bind"][0] == 200 and not outcome["bind"][2]["Error"]
    assert cluster.get_pod("default", "slow")["spec"]["nodeName"] == "node-a"


def test_a_busy_port_fails_in_the_constructor(serve: Callable[..., Any]) -> None:
    server = serve()
    with pytest.raises(OSError):
        make_server("uvicorn" if isinstance(server, AsyncSchedulerServer) else "asyncio", server.extender,
                    server.webhook, "127.0.0.1", server.address[1])
    assert get(server.url + "/healthz")[0] == 200


def test_shutdown_stops_serving_and_is_idempotent(serve: Callable[..., Any]) -> None:
    server = serve()
    address = server.address
    with socket.create_connection(address, timeout=WAIT_S) as idle:  # a keep-alive client, surely accepted
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        [(status, _, _)] = _read_replies(idle, 1)
        assert status == 200
        server.shutdown()
        server.shutdown()
        assert idle.recv(1) == b""  # closed by the server, not left to the client timeout
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=2).close()


def _hold_a_bind(serve: Callable[..., Any]) -> tuple[Any, SlowBindCluster, threading.Thread, dict[str, Any]]:
    cluster = SlowBindCluster(nodes=[nvidia_node("node-a")], pods=[gpu_pod("slow")])
    server = serve(cluster)
    status, _, _ = post(server.url + "/filter", {"Pod": cluster.get_pod("default", "slow"), "NodeNames": ["node-a"]})
    assert status == 200
    outcome: dict[str, Any] = {}

    def bind() -> None:
        try:
            outcome["bind"] = post(server.url + "/bind", {"PodName": "slow", "PodNamespace": "default",
                                                         "PodUID": "uid-default-slow", "Node": "node-a"})
        except OSError as exc:
            outcome["error"] = exc

    binder = threading.Thread(target=bind)
    binder.start()
    assert cluster.entered.wait(WAIT_S)
    return server, cluster, binder, outcome


def test_shutdown_lets_a_request_in_flight_answer(serve: Callable[..., Any]) -> None:
    """SIGTERM while kube-scheduler waits on a bind: the bind's reply still reaches it, then the server stops."""
    server, cluster, binder, outcome = _hold_a_bind(serve)
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    with pytest.raises(OSError):  # the listening socket closes at once, before the bind is answered
        for _ in range(200):
            socket.create_connection(server.address, timeout=2).close()
            threading.Event().wait(0.01)
    assert stopper.is_alive()  # waiting for the bind
    cluster.go.set()
    binder.join(WAIT_S)
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    assert outcome["bind"][0] == 200 and not outcome["bind"][2]["Error"]
    assert cluster.get_pod("default", "slow")["spec"]["nodeName"] == "node-a"


def test_shutdown_gives_up_on_a_request_after_the_grace_period(serve: Callable[..., Any]) -> None:
    server, cluster, binder, _ = _hold_a_bind(serve)
    try:
        stopper = threading.Thread(target=server.shutdown, kwargs={"grace_s": 0.2})
        stopper.start()
        stopper.join(WAIT_S)
        assert not stopper.is_alive()  # returned with the bind still held by the API server
        assert not cluster.go.is_set()
    finally:
        cluster.go.set()
        binder.join(WAIT_S)


def test_serve_forever_returns_when_shut_down_from_another_thread() -> None:
    engine = make_engine()
    server = AsyncSchedulerServer(Extender(engine, MemoryCluster()), Webhook(engine), "127.0.0.1", 0)
    runner = threading.Thread(target=server.serve_forever)
    runner.start()
    assert get(server.url + "/healthz")[0] == 200
    server.shutdown()
    runner.join(WAIT_S)
    assert not runner.is_alive()


def test_unknown_server_kind_is_refused() -> None:
    engine = make_engine()
    with pytest.raises(ValueError, match="unknown HTTP server 'twisted': choose one of asyncio, uvicorn"):
        make_server("twisted", Extender(engine, MemoryCluster()), Webhook(engine), "127.0.0.1", 0)
    with pytest.raises(ValueError, match="threaded HTTP server was retired"):
        make_server("threaded", Extender(engine, MemoryCluster()), Webhook(engine), "127.0.0.1", 0)


def test_asyncio_server_threads_do_not_grow_with_connections() -> None:
    """100 idle keep-alive clients (kube-scheduler and API server keep connections open) cost the asyncio
    server no thread each, and it still answers; the pool is bounded by its worker count."""
    engine = make_engine()
    server = AsyncSchedulerServer(Extender(engine, MemoryCluster()), Webhook(engine), "127.0.0.1", 0, workers=4)
    server.start()
    idle: list[socket.socket] = []
    try:
        before = threading.active_count()
        for _ in range(100):
            sock = socket.create_connection(server.address, timeout=WAIT_S)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            idle.append(sock)
        for sock in idle:
            assert _read_replies(sock, 1)[0][0] == 200
        assert post(server.url + "/webhook", None, raw=REVIEW)[0] == 200
        assert threading.active_count() <= before + 4
    finally:
        for sock in idle:
            sock.close()
        server.shutdown()


def test_the_service_serves_with_asyncio_unless_told_otherwise_and_closes_unstarted() -> None:
    from hami_core.scheduler.app import Options, Scheduler
    from hami_core.scheduler.asgi import UvicornSchedulerServer

    for options, kind in ((Options(port=0, metrics_host=None), AsyncSchedulerServer),
                          (Options(port=0, metrics_host=None, http_server="uvicorn"), UvicornSchedulerServer)):
        service = Scheduler(make_engine(), MemoryCluster(), options)
        assert isinstance(service.server, kind)
        # never started (e.g. the sync failed first): shutting down must not wait for a loop that never ran
        closer = threading.Thread(target=service.server.shutdown, daemon=True)
        closer.start()
        closer.join(WAIT_S)
        assert not closer.is_alive()
        with pytest.raises(OSError):
            socket.create_connection(service.server.address, timeout=2).close()


def test_binds_waiting_on_the_api_server_do_not_hold_up_filters_or_admission() -> None:
    """With every bind thread stuck (a gang of binds waiting on a slow API server or on node locks), /filter and
    /webhook still answer: they have a pool of their own."""
    cluster = SlowBindCluster(nodes=[nvidia_node("node-a", gpus=4)],
                              pods=[gpu_pod("b1"), gpu_pod("b2"), gpu_pod("quick")])
    engine = make_engine()
    engine.upsert_node(cluster.get_node("node-a"))
    server = AsyncSchedulerServer(Extender(engine, cluster), Webhook(engine), "127.0.0.1", 0, workers=1)
    server.start()
    binders: list[threading.Thread] = []
    try:
        for name in ("b1", "b2"):
            assert post(server.url + "/filter", {"Pod": cluster.get_pod("default", name),
                                                 "NodeNames": ["node-a"]})[2]["NodeNames"] == ["node-a"]
        for name in ("b1", "b2"):  # the first holds the only bind thread, the second queues behind it
            binders.append(threading.Thread(target=post, args=(server.url + "/bind", {
                "PodName": name, "PodNamespace": "default", "PodUID": f"uid-default-{name}", "Node": "node-a"})))
            binders[-1].start()
            assert cluster.entered.wait(WAIT_S)  # b1 is in before b2 is sent: b2 must not take the lock first
        status, _, result = post(server.url + "/filter", {"Pod": cluster.get_pod("default", "quick"),
                                                          "NodeNames": ["node-a"]})
        assert status == 200 and result["NodeNames"] == ["node-a"]
        assert post(server.url + "/webhook", None, raw=REVIEW)[0] == 200
        assert not cluster.go.is_set()  # both binds are still waiting
    finally:
        cluster.go.set()
        for binder in binders:
            binder.join(WAIT_S)
        server.shutdown()
    assert cluster.get_pod("default", "b1")["spec"].get("nodeName") == "node-a"


@pytest.mark.parametrize("kind", HTTP_SERVERS)
def test_webhook_bind_splits_the_webhook_from_the_extender(kind: str) -> None:
    """``--webhook-bind``: /webhook and the probes on their own listener, /filter and /bind alone on --http-bind
    (the sidecar layout keeps the latter on loopback)."""
    from hami_core.scheduler.app import Options, Scheduler

    cluster = MemoryCluster(nodes=[nvidia_node("node-a")], pods=[gpu_pod("p")])
    service = Scheduler(make_engine(), cluster, Options(port=0, metrics_host=None, http_server=kind,
                                                        webhook_host="127.0.0.1", webhook_port=0))
    service.start()
    try:
        extender, webhook = service.server.url, service.webhook_server.url
        assert extender != webhook and len(service.servers) == 2
        filt = {"Pod": cluster.get_pod("default", "p"), "NodeNames": ["node-a"]}
        assert post(extender + "/filter", filt)[2]["NodeNames"] == ["node-a"]
        assert post(webhook + "/webhook", None, raw=REVIEW)[0] == 200
        assert post(extender + "/webhook", None, raw=REVIEW)[0] == 404
        assert post(webhook + "/filter", filt)[0] == 404 and post(webhook + "/bind", {"PodName": "p"})[0] == 404
        assert get(webhook + "/healthz")[0] == 200 and get(webhook + "/readyz")[0] == 200
        assert get(extender + "/healthz")[0] == 404  # the extender's listener serves the extender only
    finally:
        service.stop()
    for url in (extender, webhook):
        with pytest.raises(OSError):
            get(url + "/healthz")


def test_a_busy_webhook_port_closes_the_extender_listener_too() -> None:
    from hami_core.scheduler.app import Options, Scheduler

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with pytest.raises(OSError):
            Scheduler(make_engine(), MemoryCluster(), Options(port=0, metrics_host=None, webhook_host="127.0.0.1",
                                                               webhook_port=busy))


@pytest.mark.parametrize(("argv", "message"), [
    (["--client-ca-file", "ca.crt"], "--client-ca-file needs TLS"),
    (["--webhook-bind", "127.0.0.1:9555", "--http-bind", "127.0.0.1:9555"], "need different ports"),
    (["--extender-token-file", "/nonexistent/token"], "extender token file /nonexistent/token"),
])
def test_scheduler_flag_mistakes_are_one_line_errors(capsys: pytest.CaptureFixture[str], tmp_path: Any,
                                                     argv: list[str], message: str) -> None:
    from hami_core.cli import main

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    assert main(["scheduler", "--cluster-file", str(cluster), "--metrics-bind", "", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
