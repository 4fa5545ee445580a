"""Servers for the security tests: the real scheduler HTTP servers (extender + webhook on an NVIDIA engine and a
MemoryCluster), plain or TLS with a freshly generated self-signed certificate, with a short client timeout.
Every test runs against both servers (``asyncio``, the default, and ``threaded``): they must answer alike."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scheduler"))

from sched_helpers import make_engine, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import HTTP_SERVERS
from hami_core.scheduler.app import make_server as make_http_server
from hami_core.scheduler.certs import write_self_signed
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.server import SchedulerServer
from hami_core.scheduler.webhook import Webhook

#: Short, so that the slow-client tests finish quickly; each test waits for the server to act, not for a time.
CLIENT_TIMEOUT_S = 1.0


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(params=HTTP_SERVERS)
def make_server(request: pytest.FixtureRequest, certs: tuple[Path, Path]) -> Iterator[Callable[..., SchedulerServer]]:
    started: list[SchedulerServer] = []

    def make(*, tls: bool = False, client_timeout_s: float = CLIENT_TIMEOUT_S) -> SchedulerServer:
        engine = make_engine()
        cluster = MemoryCluster(nodes=[nvidia_node("node-a")])
        cert, key = certs if tls else (None, None)
        server = make_http_server(request.param, Extender(engine, cluster), Webhook(engine), "127.0.0.1", 0,
                                  cert_file=str(cert) if cert else None, key_file=str(key) if key else None,
                                  client_timeout_s=client_timeout_s)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.shutdown()
