"""Servers for the security tests: the real scheduler HTTP servers (extender + webhook on an NVIDIA engine and a
MemoryCluster), plain or TLS with a freshly generated self-signed certificate (or the mutual-TLS PKI of
``pki.py``), with short client and request timeouts. Every test runs against every server kind
(``asyncio``, the default, and ``uvicorn``): they must answer alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pki import Pki, make_pki
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import HTTP_SERVERS
from hami_core.scheduler.app import make_server as make_http_server
from hami_core.scheduler.certs import write_self_signed
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.server import SchedulerServer
from hami_core.scheduler.webhook import Webhook

#: Short, so that the slow-client tests finish quickly; each test waits for the server to act, not for a time.
CLIENT_TIMEOUT_S = 1.0
REQUEST_TIMEOUT_S = 1.0


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=HTTP_SERVERS)
def server_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_server(server_kind: str, certs: tuple[Path, Path]) -> Iterator[Callable[..., SchedulerServer]]:
    started: list[SchedulerServer] = []

    def make(*, tls: bool = False, client_timeout_s: float = CLIENT_TIMEOUT_S,
             request_timeout_s: float = REQUEST_TIMEOUT_S, webhook: Any = None, engine: Any = None,
             **kwargs: Any) -> SchedulerServer:
        engine = engine or make_engine()
        cluster = MemoryCluster(nodes=[nvidia_node("node-a")], pods=[gpu_pod("p")])
        for node in cluster.list_nodes():
            engine.upsert_node(node)
        if tls and "cert_file" not in kwargs:
            kwargs.update(cert_file=str(certs[0]), key_file=str(certs[1]))
        server = make_http_server(server_kind, Extender(engine, cluster), webhook or Webhook(engine), "127.0.0.1",
                                  0, client_timeout_s=client_timeout_s, request_timeout_s=request_timeout_s,
                                  **kwargs)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.shutdown()
