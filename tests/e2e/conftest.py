"""The e2e tier (``make e2e``): hami-py against a real kube-apiserver, kube-scheduler and etcd.

Every test module here sets ``pytestmark = pytest.mark.e2e``, which ``make test`` deselects. The binaries come
from ``make e2e-bin`` (``$HAMI_E2E_BIN``); without them the tests skip with a message, or fail when
``HAMI_E2E_REQUIRE=1`` (``make e2e`` sets it, so CI cannot pass by skipping). One control plane serves the
session; each test gets its own namespace and nodes, removed afterwards. After every test the audit log is read:
a request of hami's ServiceAccounts that RBAC refused fails the test (unless it is marked ``expect_forbidden``).
A failing test prints the tail of every component's log.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from realkube import audit, procs
from realkube.controlplane import ControlPlane, binaries, kubectl
from realkube.stack import Stack

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "expect_forbidden: the test provokes RBAC refusals of hami's identities")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for proc in list(procs.live):
            report.sections.append((f"log of {proc.name} ({proc.log})", proc.tail(80)))


@pytest.fixture(scope="session")
def bindir() -> Path:
    found = binaries()
    if found is None:
        message = ("the e2e tier needs the control-plane binaries: run `make e2e` (it builds them with "
                   "`make e2e-bin`, which needs Go) or set HAMI_E2E_BIN to the folder `make e2e-bin` printed")
        if os.environ.get("HAMI_E2E_REQUIRE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def plane(bindir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(bindir, tmp_path_factory.mktemp("controlplane"))
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def stack(plane: ControlPlane, bindir: Path) -> Iterator[Stack]:
    """The shipped RBAC applied; hami scheduler + kube-scheduler + webhook + the kubelet parts, as their
    ServiceAccounts."""
    s = Stack(plane, bindir)
    try:
        s.install()
        s.start()
        yield s
    finally:
        s.stop()


_counter = itertools.count(1)


@pytest.fixture
def ns(stack: Stack) -> Iterator[str]:
    """A fresh namespace; its pods are removed at the end (no namespace controller runs to delete it)."""
    name = f"e2e-{os.getpid() % 1000}-{next(_counter)}"
    stack.plane.ensure_namespace(name)
    yield name
    stack.delete_pods(name)


@pytest.fixture
def make_nodes(stack: Stack) -> Iterator[Callable[..., list[str]]]:
    """``make_nodes(n, prefix, gpus=8)``: Ready GPU nodes played by the harness's kubelet; deleted at the end."""
    made: list[str] = []

    def factory(count: int, prefix: str = "gpu", **kwargs: Any) -> list[str]:
        names = stack.create_nodes(count, prefix, **kwargs)
        made.extend(names)
        return names

    yield factory
    stack.delete_nodes(made)


@pytest.fixture(autouse=True)
def _rbac_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test during which kube-apiserver refused any request of hami's ServiceAccounts (on whichever control
    plane the test ran: the session's, or a module's own)."""
    owner = next((n for n in ("stack", "own_stack", "pair_stack") if n in request.fixturenames), None)
    if owner is None:
        yield
        return
    started = datetime.now(UTC)
    yield
    plane: ControlPlane = request.getfixturevalue(owner).plane
    if request.node.get_closest_marker("expect_forbidden") or not plane.apiserver.audit:
        return
    time.sleep(1.2)  # the audit log is written in batches of at most a second
    refused = audit.forbidden(audit.calls(plane.apiserver.audit_events(), since=started))
    assert not refused, "RBAC refused hami's requests:\n" + "\n".join(sorted({str(c) for c in refused}))


__all__ = ["kubectl"]
