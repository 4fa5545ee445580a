"""The extender over mutual TLS on the real control plane: hami runs with ``--client-ca-file`` (a CA of its own,
not the cluster's), and the stock kube-scheduler v1.37 presents a client certificate it signed from its extender
``tlsConfig`` (certFile/keyFile) and schedules a GPU pod through hami's ``/filter`` and ``/bind``. The same
extender port refuses a caller without a certificate (401), and one whose certificate another CA signed (the
cluster's own CA: being a cluster client is not being the extender's) in the TLS handshake."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realkube.controlplane import ControlPlane, KubeScheduler
from realkube.hami import HamiScheduler, scheduler_config
from realkube.objects import KubeletSim, gpu_pod
from realkube.pki import CA, Pair
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e

NS = "mtls"
CLIENTS: dict[str, Pair] = {}


@pytest.fixture(scope="module")
def own_stack(bindir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A control plane of its own, with hami and kube-scheduler started as Stack.start does, but hami requiring
    client certificates of the extender CA and kube-scheduler presenting one."""
    with ControlPlane(bindir, tmp_path_factory.mktemp("mtls")) as plane:
        stack = Stack(plane, bindir)
        stack.install()
        extender_ca = CA(plane.workdir / "extender-ca", "hami-extender-client-ca")
        CLIENTS["kube-scheduler"] = extender_ca.issue("extender-client", "kube-scheduler", client=True)
        CLIENTS["stranger"] = plane.ca.issue("cluster-client", "kube-scheduler", client=True)
        stack.hami_extra = {"--client-ca-file": str(extender_ca.cert)}
        stack.hami = HamiScheduler(stack.workdir, plane.ca, stack.scheduler_kubeconfig, extra=stack.hami_extra)
        try:
            stack.hami.start(ready=False)
            config = scheduler_config(stack.hami.url, plane.ca.pem)
            for extender in config["extenders"]:
                extender["tlsConfig"].update(certFile=str(CLIENTS["kube-scheduler"].cert),
                                             keyFile=str(CLIENTS["kube-scheduler"].key))
            stack.scheduler = KubeScheduler(bindir, stack.workdir, "kube-scheduler", config,
                                            stack.scheduler_kubeconfig)
            stack.scheduler.start()
            stack.hami.wait_ready()
            stack.register_webhook()
            stack.kubelet = KubeletSim(stack.admin_cluster(), stack.device_cluster(), []).start()
            plane.ensure_namespace(NS)
            yield stack
        finally:
            stack.stop()


def _extender_call(stack: Stack, client: Pair | None) -> tuple[int, Any]:
    assert stack.hami is not None
    ctx = ssl.create_default_context(cadata=stack.hami.ca_pem.decode())
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    conn = http.client.HTTPSConnection("127.0.0.1", stack.hami.port, context=ctx, timeout=30)
    try:
        body = json.dumps({"Pod": gpu_pod("nobody", namespace=NS), "NodeNames": ["mtls-0"]})
        conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if resp.status == 200 else data.decode()
    finally:
        conn.close()


def test_kube_scheduler_schedules_through_the_extender_over_mutual_tls(own_stack: Stack) -> None:
    stack = own_stack
    stack.create_nodes(1, "mtls")
    stack.create_pods(NS, [gpu_pod("through-mtls", namespace=NS, mem=2000, cores=10)])
    [pod] = stack.wait_bound(NS, 1, 120)
    assert pod["spec"]["nodeName"] == "mtls-0"
    assert pod["metadata"]["annotations"]["hami.io/vgpu-node"] == "mtls-0"  # hami's filter decided it
    wait_until("allocated", lambda: stack.pod(NS, "through-mtls")["metadata"]["annotations"].get(
        "hami.io/bind-phase") == "success", 60, 0.5)


def test_the_extender_refuses_callers_without_the_extender_ca(own_stack: Stack) -> None:
    status, text = _extender_call(own_stack, None)
    assert status == 401 and "needs authentication" in text
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _extender_call(own_stack, CLIENTS["stranger"])
    status, result = _extender_call(own_stack, CLIENTS["kube-scheduler"])
    # past authentication: the extender itself judges the body (a pod that does not exist books nothing)
    assert status in (200, 400) and "authentication" not in str(result), (status, result)
