"""Scenario 8: restart and watch loss on the real control plane. hami stopped, kube-apiserver restarted and etcd
compacted (every older resourceVersion gone): the restarted hami's ledger is the one before. A hami that was
stalled across the same (its watches' resourceVersion now compacted) gets 410 Gone, relists, and converges."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from realkube.controlplane import ControlPlane
from realkube.objects import gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e

NS = "restart"


@pytest.fixture(scope="module")
def own_stack(bindir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A control plane of its own: this test restarts kube-apiserver."""
    with ControlPlane(bindir, tmp_path_factory.mktemp("restart")) as plane:
        stack = Stack(plane, bindir)
        stack.install()
        stack.start()
        plane.ensure_namespace(NS)
        try:
            yield stack
        finally:
            stack.stop()


def _restart_apiserver_compacted(stack: Stack) -> int:
    plane = stack.plane
    plane.apiserver.stop()
    revision = plane.etcd.compact()
    plane.apiserver.start()
    return revision


def test_restart_and_watch_loss(own_stack: Stack) -> None:
    stack = own_stack
    stack.create_nodes(4, "rs")
    stack.create_pods(NS, [gpu_pod(f"p-{i:02d}", namespace=NS, mem=4000 + 500 * i, cores=5) for i in range(30)])
    stack.wait_bound(NS, 30, 120)
    wait_until("allocated", lambda: all(p["metadata"]["annotations"].get("hami.io/bind-phase") == "success"
                                        for p in stack.pods(NS)), 60, 0.5)
    before = stack.hami_ledger(NS)
    assert before == stack.api_ledger(NS) and len(before) == 30

    # 1. hami down while kube-apiserver restarts over a compacted etcd: the new hami rebuilds the same ledger
    assert stack.hami is not None
    stack.hami.stop()
    _restart_apiserver_compacted(stack)
    stack.restart_hami(stack.hami_extra)
    assert stack.hami_ledger(NS) == before

    # 2. hami stalled (SIGSTOP, its watches open) while pods go, etcd is compacted and kube-apiserver restarts:
    # when it runs again its watches resume from resourceVersions that no longer exist
    proc = stack.hami.proc
    assert proc is not None
    proc.pause()
    try:
        core = stack.plane.core()
        for i in range(10):
            core.delete_namespaced_pod(f"p-{i:02d}", NS, grace_period_seconds=0, _preload_content=False)
        wait_until("deleted", lambda: len(stack.pods(NS)) == 20, 30)
        _restart_apiserver_compacted(stack)
    finally:
        proc.resume()
    log = proc.log

    def relisted() -> bool:
        return bool(re.search(r"Pod watch (from resourceVersion \d+: 410 Gone|ERROR event \(410)", log.read_text()))

    wait_until("hami's pod watch got 410 Gone and relisted", relisted, 60, 0.5)
    after = stack.api_ledger(NS)
    assert len(after) == 20
    wait_until("hami's ledger converges", lambda: stack.hami_ledger(NS) == after, 30, 0.5)
