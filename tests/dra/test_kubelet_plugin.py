"""The kubelet side of DRA mode over the real protocol: the fake kubelet registers the plugin through its
``-reg.sock`` and prepares / unprepares claims on its ``dra.sock``; the env comes from the real hami-nvidia
``hami_allocate`` hook, the claims from a MemoryCluster (and a KubeCluster on the fake API server)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubeapi.fake_apiserver import FakeApiServer

from hami_core.cluster.base import NotFoundError
from hami_core.cluster.kube import KubeCluster
from hami_core.cluster.memory import MemoryCluster
from hami_core.dra import cdi
from hami_core.dra.checkpoint import Checkpoint, CheckpointError
from hami_core.dra.kubelet import regen
from hami_core.dra.kubelet.plugin import DRA_SERVICE, MAX_CLAIMS, KubeletPlugin, hook_allocator, serve_kubelet_plugin
from hami_core.dra.kubelet.sockets import SocketError
from hami_core.dra.model import CAP_CORES, CAP_MEMORY, DraCapacity, DraDevice, driver_name
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.types import ContainerAllocation
from hami_core.testing.fake_kubelet import DraKubelet

NODE = "node-a"
DRIVER = driver_name("NVIDIA")
UUID0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
UUID1 = "GPU-0a1b2c3d-0000-1111-2222-666677778888"
GIB = 1 << 30
CLAIM_UID = "3f2a9c1e-1111-4222-8333-944455556666"


class Devices:
    """A DeviceLookup: the node's devices by (driver, name)."""

    def __init__(self, *devices: DraDevice) -> None:
        self.by_key = {(d.driver, d.name): d for d in devices}

    def device(self, driver: str, name: str) -> DraDevice | None:
        return self.by_key.get((driver, name))


def gpu(index: int, uuid: str) -> DraDevice:
    return DraDevice(backend="NVIDIA", index=index, uuid=uuid, type="NVIDIA A100",
                     capacity={CAP_MEMORY: DraCapacity(value=80 * GIB, default=GIB),
                               CAP_CORES: DraCapacity(value=100, default=10)})


class CountingClaims:
    """A ClaimSource counting reads (a retry served from the checkpoint reads nothing)."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.reads = 0

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        return self.cluster.get_resource_claim(namespace, name)


def claim(name: str = "train-gpu", uid: str = CLAIM_UID, results: list[dict[str, Any]] | None = None,
          allocated: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": "ml", "name": name, "uid": uid},
                           "spec": {"devices": {"requests": [{"name": "gpu"}]}}}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": results if results is not None else [
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0", "shareID": "s-1",
             "consumedCapacity": {CAP_MEMORY: "4Gi", CAP_CORES: "25"}},
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0", "shareID": "s-2",
             "consumedCapacity": {CAP_MEMORY: "4Gi", CAP_CORES: "25"}},
        ]}}}
    return obj


class Env:
    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.hook = root / "hook"
        monkeypatch.setenv("HOOK_PATH", str(self.hook))
        self.registry = root / "reg"
        self.plugins = root / "plugins"
        self.cdi = root / "cdi"
        self.cluster = MemoryCluster()
        self.claims = CountingClaims(self.cluster)
        self.devices = Devices(gpu(0, UUID0), gpu(1, UUID1))
        pm = get_plugin_manager()
        backend = next(b for b in pm.backends({"nvidia": {}}) if b.name == "NVIDIA")
        self.allocate = hook_allocator(RoutedHooks(pm, [backend]), backend)
        self.plugin: KubeletPlugin | None = None

    def start(self, **kw: Any) -> KubeletPlugin:
        args: dict[str, Any] = {"driver": DRIVER, "node_name": NODE, "devices": self.devices, "claims": self.claims,
                                "allocate": self.allocate, "registry_dir": self.registry,
                                "plugins_dir": self.plugins, "cdi_dir": self.cdi} | kw
        self.plugin = serve_kubelet_plugin(**args)
        return self.plugin

    def kubelet(self) -> DraKubelet:
        k = DraKubelet(self.registry / f"{DRIVER}-reg.sock")
        k.register(DRIVER)
        return k

    def stop(self) -> None:
        if self.plugin is not None:
            self.plugin.stop(grace=None)
            self.plugin = None


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(prefix="hdra", dir="/tmp"))  # unix socket paths must stay short
    e = Env(root, monkeypatch)
    try:
        yield e
    finally:
        e.stop()
        shutil.rmtree(root, ignore_errors=True)


def spec_file(env: Env, uid: str = CLAIM_UID) -> Path:
    return env.cdi / f"{DRIVER}-{uid}.json"


REQ = ("ml", "train-gpu", CLAIM_UID)


# ------------------------------------------------------------------------------------------ registration
def test_registration_through_the_fake_kubelet(env: Env) -> None:
    plugin = env.start()
    with env.kubelet() as k:
        assert (k.info.type, k.info.name, list(k.info.supported_versions)) == ("DRAPlugin", DRIVER, [DRA_SERVICE])
        assert k.info.endpoint == str(env.plugins / DRIVER / "dra.sock")
    assert plugin.registration.registered.wait(2)
    assert plugin.registration.last_status == (True, "")


def test_regenerating_the_stubs_gives_identical_files(tmp_path: Path) -> None:
    for proto in regen.PROTOS:
        out = tmp_path / Path(proto).parent.name
        out.mkdir()
        for name, text in regen.generate(proto, out).items():
            current = (regen.repo_root() / Path(proto).parent / name).read_text(encoding="utf-8")
            assert current == text, f"{proto}: {name} is stale: python -m hami_core.dra.kubelet.regen"


# ------------------------------------------------------------------------------------------ prepare
def test_prepare_writes_a_cdi_spec_with_the_claims_limits(env: Env) -> None:
    env.cluster.add_resource_claim(claim())
    env.start()
    with env.kubelet() as k:
        resp = k.prepare(REQ).claims[CLAIM_UID]
    assert resp.error == ""
    ids = [f"{DRIVER}/claim={CLAIM_UID}-gpu-0", f"{DRIVER}/claim={CLAIM_UID}-gpu-0-1"]
    assert [(d.request_names, d.pool_name, d.device_name, d.cdi_device_ids, d.share_id) for d in resp.devices] == [
        (["gpu"], NODE, "gpu-0", [ids[0]], "s-1"), (["gpu"], NODE, "gpu-0", [ids[1]], "s-2")]
    spec = json.loads(spec_file(env).read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.6.0", f"{DRIVER}/claim")
    assert [d["name"] for d in spec["devices"]] == [i.partition("=")[2] for i in ids]
    edits = spec["devices"][0]["containerEdits"]
    assert spec["devices"][1]["containerEdits"] == edits
    env_vars = dict(e.split("=", 1) for e in edits["env"])
    # two shares of 4Gi / 25% on the same card: one HAMi-core limit of 8192 MiB and 50%
    assert env_vars["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in env_vars
    assert env_vars["CUDA_DEVICE_SM_LIMIT"] == "50"
    assert env_vars["NVIDIA_VISIBLE_DEVICES"] == UUID0
    vgpu = f"{env.hook}/vgpu"
    assert env_vars["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith(f"{vgpu}/")
    mounts = {m["containerPath"]: (m["hostPath"], m["options"][0]) for m in edits["mounts"]}
    assert mounts["/etc/ld.so.preload"] == (f"{vgpu}/ld.so.preload", "ro")
    assert mounts[f"{vgpu}/libvgpu.so"] == (f"{vgpu}/libvgpu.so", "ro")
    cache_dir = f"{vgpu}/containers/{CLAIM_UID}_dra-claim"
    assert mounts[vgpu] == (cache_dir, "rw") and Path(cache_dir).is_dir()
    assert stat.S_IMODE(spec_file(env).stat().st_mode) == 0o644


def test_two_gpus_get_one_limit_each_in_result_order(env: Env) -> None:
    env.cluster.add_resource_claim(claim(results=[
        {"request": "a", "driver": DRIVER, "pool": NODE, "device": "gpu-1", "consumedCapacity": {CAP_MEMORY: "2Gi"}},
        {"request": "b", "driver": DRIVER, "pool": NODE, "device": "gpu-0"},  # no consumedCapacity: the whole card
        {"request": "c", "driver": "other.example.com", "pool": NODE, "device": "x-0"}]))
    env.start()
    with env.kubelet() as k:
        resp = k.prepare(REQ).claims[CLAIM_UID]
    assert resp.error == "" and [d.device_name for d in resp.devices] == ["gpu-1", "gpu-0"]
    env_vars = dict(e.split("=", 1) for e in json.loads(spec_file(env).read_text())["devices"][0]["containerEdits"]
                    ["env"])
    assert (env_vars["NVIDIA_VISIBLE_DEVICES"], env_vars["CUDA_DEVICE_MEMORY_LIMIT_0"],
            env_vars["CUDA_DEVICE_MEMORY_LIMIT_1"]) == (f"{UUID1},{UUID0}", "2048m", "81920m")


def test_retry_returns_the_same_answer_without_rewriting(env: Env) -> None:
    env.cluster.add_resource_claim(claim())
    env.start()
    with env.kubelet() as k:
        first = k.prepare(REQ).claims[CLAIM_UID]
        before = spec_file(env).stat()
        second = k.prepare(REQ).claims[CLAIM_UID]
    assert second == first and second.error == ""
    after = spec_file(env).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert env.claims.reads == 1


def test_restart_answers_from_the_checkpoint(env: Env) -> None:
    env.cluster.add_resource_claim(claim())
    env.start()
    with env.kubelet() as k:
        first = k.prepare(REQ).claims[CLAIM_UID]
    env.stop()
    env.cluster.delete_resource_claim("ml", "train-gpu")  # not read again: the checkpoint answers
    env.start()
    with env.kubelet() as k:
        again = k.prepare(REQ).claims[CLAIM_UID]
    assert again == first and again.error == ""
    assert env.claims.reads == 1


def test_a_lost_spec_is_written_again(env: Env) -> None:
    env.cluster.add_resource_claim(claim())
    env.start()
    with env.kubelet() as k:
        first = k.prepare(REQ).claims[CLAIM_UID]
        spec_file(env).unlink()  # /var/run/cdi is tmpfs: a reboot empties it, the checkpoint survives
        again = k.prepare(REQ).claims[CLAIM_UID]
    assert again == first and spec_file(env).exists() and env.claims.reads == 2


def test_unprepare_removes_the_spec_and_the_entry(env: Env) -> None:
    env.cluster.add_resource_claim(claim())
    plugin = env.start()
    with env.kubelet() as k:
        k.prepare(REQ)
        assert spec_file(env).exists()
        resp = k.unprepare(REQ)
        assert resp.claims[CLAIM_UID].error == ""
        assert not spec_file(env).exists()
        assert plugin.servicer.checkpoint.get(CLAIM_UID) is None
        assert Checkpoint(env.plugins / DRIVER).claims() == {}
        # kubelet retries: unpreparing an unknown claim succeeds
        assert k.unprepare(REQ).claims[CLAIM_UID].error == ""
        assert k.unprepare(("ml", "never", "0000-never")).claims["0000-never"].error == ""


# ------------------------------------------------------------------------------------------ refusals
def prepare_error(env: Env, obj: dict[str, Any] | None, req: tuple[str, str, str] = REQ) -> str:
    if obj is not None:
        env.cluster.add_resource_claim(obj)
    env.start()
    with env.kubelet() as k:
        resp = k.prepare(req).claims[req[2]]
    assert list(resp.devices) == []
    assert not spec_file(env, req[2]).exists()
    assert "Traceback" not in resp.error
    return resp.error


def test_a_recreated_claim_is_refused(env: Env) -> None:
    error = prepare_error(env, claim(uid="99999999-aaaa-4bbb-8ccc-dddddddddddd"))
    assert "ml/train-gpu" in error and "metadata.uid" in error and CLAIM_UID in error


def test_a_missing_claim_is_refused(env: Env) -> None:
    error = prepare_error(env, None)
    assert "ml/train-gpu" in error and "cannot read it" in error and "not found" in error


def test_an_unallocated_claim_is_refused(env: Env) -> None:
    assert "status.allocation is not set" in prepare_error(env, claim(allocated=False))


def test_a_claim_for_another_driver_is_refused(env: Env) -> None:
    error = prepare_error(env, claim(results=[{"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE,
                                               "device": "gpu-0"}]))
    assert f"no device of driver {DRIVER} in pool {NODE}" in error


def test_a_claim_for_another_node_is_refused(env: Env) -> None:
    error = prepare_error(env, claim(results=[{"request": "gpu", "driver": DRIVER, "pool": "node-b",
                                               "device": "gpu-0"}]))
    assert "in pool 'node-b'" in error


def test_an_unknown_device_is_refused(env: Env) -> None:
    error = prepare_error(env, claim(results=[{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-7"}]))
    assert "status.allocation.devices.results[0].device" in error and "'gpu-7'" in error


@pytest.mark.parametrize(("consumed", "field"), [({CAP_MEMORY: "81Gi"}, "consumedCapacity.memory"),
                                                 ({CAP_CORES: "150"}, "consumedCapacity.cores"),
                                                 ({CAP_MEMORY: "lots"}, "consumedCapacity.memory")])
def test_bad_consumed_capacity_is_refused(env: Env, consumed: dict[str, str], field: str) -> None:
    error = prepare_error(env, claim(results=[{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
                                               "consumedCapacity": consumed}]))
    assert f"results[0].{field}" in error


def test_vendor_failures_are_one_line_per_claim(env: Env) -> None:
    def refuse(pod: Any, devices: Any) -> ContainerAllocation:
        raise HamiError("pod ml/train-gpu: no MIG profile fits")

    def crash(pod: Any, devices: Any) -> ContainerAllocation:
        raise KeyError("boom")

    env.cluster.add_resource_claim(claim())
    env.start(allocate=refuse)
    with env.kubelet() as k:
        assert "the vendor refused its devices: pod ml/train-gpu: no MIG profile fits" in \
            k.prepare(REQ).claims[CLAIM_UID].error
    env.stop()
    env.start(allocate=crash)
    with env.kubelet() as k:
        error = k.prepare(REQ).claims[CLAIM_UID].error
    assert "ml/train-gpu" in error and "KeyError" in error and "\n" not in error
    assert not spec_file(env).exists()


def test_bad_requests_are_bounded(env: Env) -> None:
    env.start()
    with env.kubelet() as k:
        with pytest.raises(grpc.RpcError) as info:
            k.prepare(*[("ml", f"c{i}", f"u-{i}") for i in range(MAX_CLAIMS + 1)])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"at most {MAX_CLAIMS}" in info.value.details()
        with pytest.raises(grpc.RpcError):
            k.unprepare(*[("ml", f"c{i}", f"u-{i}") for i in range(MAX_CLAIMS + 1)])
        resp = k.prepare(("", "c", "u-1"), ("ml", "x" * 300, "u-2"), ("ml", "c", "../../etc/passwd"),
                         ("ml/../kube-system", "c", "u-3"), ("ml", "a/b", "u-4")).claims
        assert "namespace '' is not a DNS label" in resp["u-1"].error
        assert "is not a DNS subdomain" in resp["u-2"].error
        assert "is not a DNS label" in resp["u-3"].error
        assert "name 'a/b' is not a DNS subdomain" in resp["u-4"].error
        assert "is not a Kubernetes UID" in resp["../../etc/passwd"].error
        assert "is not a Kubernetes UID" in k.unprepare(("ml", "c", "../x")).claims["../x"].error
    assert env.claims.reads == 0


def test_a_corrupt_checkpoint_stops_the_plugin_from_starting(env: Env) -> None:
    env.cluster.add_resource_claim(claim())
    env.start()
    with env.kubelet() as k:
        k.prepare(REQ)
    env.stop()
    path = env.plugins / DRIVER / "checkpoint.json"
    doc = json.loads(path.read_text())
    doc["entries"][CLAIM_UID]["devices"][0]["device_name"] = "gpu-1"
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="checksum"):
        env.start()


# ------------------------------------------------------------------------------------------ sockets
def test_sockets_are_private_and_stale_ones_replaced(env: Env) -> None:
    (env.plugins / DRIVER).mkdir(parents=True)
    env.registry.mkdir()
    import socket as socketlib

    stale = socketlib.socket(socketlib.AF_UNIX)
    stale.bind(str(env.registry / f"{DRIVER}-reg.sock"))
    stale.close()  # bound, never listening: what a crashed plugin leaves
    plugin = env.start()
    for sock in (plugin.dra_socket, plugin.registration_socket):
        assert stat.S_ISSOCK(sock.lstat().st_mode) and stat.S_IMODE(sock.lstat().st_mode) == 0o600
    with env.kubelet() as k:
        assert k.info.name == DRIVER
    # a second plugin on the same paths: refused, the live one keeps serving
    with pytest.raises(SocketError, match="another server is listening"):
        serve_kubelet_plugin(driver=DRIVER, node_name=NODE, devices=env.devices, claims=env.claims,
                             allocate=env.allocate, registry_dir=env.registry, plugins_dir=env.plugins,
                             cdi_dir=env.cdi)
    with env.kubelet() as k:
        assert k.info.name == DRIVER
    env.stop()
    assert not plugin.dra_socket.exists() and not plugin.registration_socket.exists()


def test_a_non_socket_at_the_path_is_not_deleted(env: Env) -> None:
    env.registry.mkdir()
    victim = env.registry / f"{DRIVER}-reg.sock"
    victim.write_text("precious")
    with pytest.raises(SocketError, match="not a socket"):
        env.start()
    assert victim.read_text() == "precious"
    assert not (env.plugins / DRIVER / "dra.sock").exists()


def _connect_as_nobody(path: Path) -> str:
    code = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
            "try:\n s.connect(sys.argv[1]); print('connected')\n"
            "except PermissionError: print('denied')\n")
    # The system interpreter: another user may not be able to run the venv's (under /root).
    out = subprocess.run([SYSTEM_PYTHON, "-I", "-c", code, str(path)], user=65534, group=65534, extra_groups=[],
                         capture_output=True, text=True, timeout=30, cwd="/")
    return out.stdout.strip() or out.stderr.strip()


SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the hostile caller as another user")
def test_another_user_cannot_call_the_plugin(env: Env) -> None:
    plugin = env.start()
    for d in (env.root, env.registry, env.plugins, env.plugins / DRIVER):
        os.chmod(d, 0o755)  # let the caller reach the sockets: only their own mode stands in its way
    for sock in (plugin.dra_socket, plugin.registration_socket):
        assert _connect_as_nobody(sock) == "denied"
    os.chmod(plugin.dra_socket, 0o666)  # the control: the same caller gets through an open socket
    assert _connect_as_nobody(plugin.dra_socket) == "connected"


# ------------------------------------------------------------------------------------------ the clusters
def test_kube_cluster_reads_resource_claims() -> None:
    from kubernetes import client

    with FakeApiServer() as srv:
        api = client.ApiClient(client.Configuration(host=srv.url))
        kc = KubeCluster(api_client=api, qps=0, request_timeout_s=5)
        try:
            srv.create("resourceclaims", "ml", claim())
            got = kc.get_resource_claim("ml", "train-gpu")
            assert (got["kind"], got["apiVersion"], got["metadata"]["uid"]) == (
                "ResourceClaim", "resource.k8s.io/v1", CLAIM_UID)
            assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
            with pytest.raises(NotFoundError):
                kc.get_resource_claim("ml", "nope")
        finally:
            kc.close()
            api.close()


def test_memory_cluster_resource_claims() -> None:
    mc = MemoryCluster()
    stored = mc.add_resource_claim(claim())
    assert mc.get_resource_claim("ml", "train-gpu") == stored
    mc.delete_resource_claim("ml", "train-gpu")
    with pytest.raises(NotFoundError, match="train-gpu"):
        mc.get_resource_claim("ml", "train-gpu")


def test_cdi_ids_parse_back() -> None:
    assert cdi.device_id(DRIVER, f"{CLAIM_UID}-gpu-0").partition("=")[0] == cdi.cdi_kind(DRIVER)


def test_the_stubs_speak_kubelets_wire_names() -> None:
    """The method paths and field numbers of k8s.io/kubelet/pkg/apis/dra/v1 and pluginregistration/v1."""
    from hami_core.dra.kubelet.registration import api_pb2 as reg_pb
    from hami_core.dra.kubelet.v1 import api_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    assert reg_pb.DESCRIPTOR.services_by_name["Registration"].full_name == "pluginregistration.Registration"

    def numbers(message: Any) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    assert numbers(pb.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert numbers(pb.Device) == {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4,
                                  "share_id": 5}
    assert numbers(pb.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert numbers(pb.NodeUnprepareResourceResponse) == {"error": 1}
    assert numbers(reg_pb.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert numbers(reg_pb.RegistrationStatus) == {"plugin_registered": 1, "error": 2}


# ------------------------------------------------------------------------------------------ with the publisher
def test_the_publishers_devices_serve_the_kubelet_plugin(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hami dra-driver``'s DraDriver as the device lookup and hook host: hami-nvidia discovers a fake A100, the
    kubelet plugin prepares a claim on the device the publisher describes, in its node context."""
    from hami_core.dra.driver import DraDriver
    from hami_core.dra.kubelet.plugin import serve_kubelet_plugins

    devices = env.root / "devices.yaml"
    devices.write_text(f"devices:\n  - {{uuid: {UUID0}, model: NVIDIA A100, memory: 40960, numa: 0}}\n")
    monkeypatch.setenv("HAMI_OVERRIDE_NVIDIA_DEVICES_FILE", str(devices))
    pm = get_plugin_manager()
    backends = [b for b in pm.backends({"nvidia": {}}) if b.name == "NVIDIA"]
    env.cluster.add_node({"metadata": {"name": NODE}})
    driver = DraDriver(pm, backends, env.cluster, NODE)
    driver.discover()
    env.cluster.add_resource_claim(claim(results=[
        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0", "shareID": "s-1",
         "consumedCapacity": {CAP_MEMORY: "10Gi", CAP_CORES: "30", "shares": "1"}}]))
    (plugin,) = serve_kubelet_plugins(driver, env.cluster, registry_dir=env.registry, plugins_dir=env.plugins,
                                      cdi_dir=env.cdi)
    env.plugin = plugin
    with env.kubelet() as k:
        resp = k.prepare(REQ).claims[CLAIM_UID]
        assert resp.error == "" and [d.device_name for d in resp.devices] == ["gpu-0"]
        env_vars = dict(e.split("=", 1) for e in json.loads(spec_file(env).read_text())["devices"][0]
                        ["containerEdits"]["env"])
        assert (env_vars["NVIDIA_VISIBLE_DEVICES"], env_vars["CUDA_DEVICE_MEMORY_LIMIT_0"],
                env_vars["CUDA_DEVICE_SM_LIMIT"]) == (UUID0, "10240m", "30")
        # the card has 40 GiB: a claim that says it consumed more is refused
        env.cluster.add_resource_claim(claim(name="big", uid="b1", results=[
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
             "consumedCapacity": {CAP_MEMORY: "41Gi"}}]))
        assert "consumedCapacity.memory" in k.prepare(("ml", "big", "b1")).claims["b1"].error


def test_concurrent_retries_prepare_once(env: Env) -> None:
    from concurrent.futures import ThreadPoolExecutor

    env.cluster.add_resource_claim(claim())
    env.start()
    with env.kubelet() as k, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: k.prepare(REQ).claims[CLAIM_UID], range(8)))
    assert all(a == answers[0] and a.error == "" for a in answers)
    assert env.claims.reads == 1
    assert [p.name for p in env.cdi.iterdir()] == [spec_file(env).name]
