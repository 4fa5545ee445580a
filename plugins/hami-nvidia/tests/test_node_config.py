"""The device plugin's per-node ``config.json`` (HAMi ``readFromConfigFile``) and ``$MIG_STRATEGY`` (its flag).

Parsing and merging are checked on :func:`hami_nvidia.config.parse_node_config`; what reaches the registration, the
kubelet and Allocate is checked end to end: ``hami device-plugin``'s app on ``--devices-file`` GPUs, the in-test
kubelet and the in-memory cluster.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nvml_testlib import NODE

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.fake_kubelet import FakeKubelet
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.manager import get_plugin_manager
from hami_core.wire import keys
from hami_core.wire.nodes import decode_node_devices_json
from hami_nvidia.config import (
    MIG_STRATEGY_ENV,
    NODE_CONFIG_ENV,
    FilterDevices,
    NvidiaConfig,
    load_node_config,
    mig_strategy,
    parse_node_config,
)

UUIDS = [f"GPU-{i}{i}{i}{i}0000-0000-1111-2222-333344445555" for i in range(4)]
SOURCE = "config.json"


def parse(*entries: Any, node: str = NODE) -> Any:
    return parse_node_config(json.dumps({"nodeconfig": list(entries)}), node, SOURCE)


# ------------------------------------------------------------------------------------------ parsing and merging
def test_the_chart_example_entry_is_read() -> None:
    # charts/hami/values.yaml devicePlugin.nodeConfiguration.config, HAMi v2.10.0, with this node's name
    nc = parse({"name": NODE, "operatingmode": "hami-core", "devicememoryscaling": 1, "devicesplitcount": 10,
                "preconfigureddevicememory": 0, "enablenumatopology": False, "migstrategy": "none",
                "filterdevices": {"uuid": [], "index": []}, "enablegetpreferredallocation": False})
    assert nc.entries == (0,) and nc.operating_mode == "hami-core" and nc.filter_devices is None
    assert dict(nc.overrides) == {"device_memory_scaling": 1.0, "device_split_count": 10,
                                  "pre_configured_device_memory": 0, "enable_numa_topology": False}
    assert (nc.mig_strategy, nc.enable_get_preferred_allocation) == ("none", False)


def test_every_entry_of_the_node_merges_in_order_and_others_are_ignored() -> None:
    nc = parse({"name": NODE, "devicesplitcount": 4, "devicememoryscaling": 2, "operatingmode": "mps",
                "filterdevices": {"uuid": [UUIDS[1]]}, "enablegetpreferredallocation": True},
               {"name": "other", "devicesplitcount": 7, "operatingmode": "mig"},
               {"name": NODE, "devicesplitcount": 6, "devicecorescaling": 0.5, "operatingmode": "",
                "filterdevices": {"uuid": [], "index": []}, "libcudaloglevel": "3"})
    assert nc.entries == (0, 2)
    # A given value overrides (the last wins); an empty operatingmode or filterdevices does not (HAMi).
    assert dict(nc.overrides) == {"device_split_count": 6, "device_memory_scaling": 2.0,
                                  "device_core_scaling": 0.5, "lib_cuda_log_level": 3}
    assert nc.operating_mode == "mps"
    assert nc.filter_devices == FilterDevices(uuid=[UUIDS[1]])
    # enablegetpreferredallocation is set by every matching entry, so the last one's (absent: false) wins.
    assert nc.enable_get_preferred_allocation is False
    cfg = nc.apply(NvidiaConfig(deviceSplitCount=10, libCudaLogLevel=1))
    assert (cfg.device_split_count, cfg.device_memory_scaling, cfg.device_core_scaling, cfg.lib_cuda_log_level) == (
        6, 2.0, 0.5, 3)


def test_no_entry_for_the_node_changes_nothing() -> None:
    nc = parse({"name": "other", "devicesplitcount": 2})
    assert nc.entries == () and not nc.overrides and nc.operating_mode == "hami-core"
    cfg = NvidiaConfig()
    assert nc.apply(cfg) is cfg


@pytest.mark.parametrize("text", ["{}", "null", '{"nodeconfig": null}', '{"nodeconfig": []}'])
def test_a_file_without_entries_changes_nothing(text: str) -> None:
    nc = parse_node_config(text, NODE, SOURCE)
    assert nc.entries == () and not nc.overrides and nc.filter_devices is None


def test_filterdevices_by_uuid_and_by_index() -> None:
    nc = parse({"name": NODE, "filterdevices": {"uuid": [UUIDS[0]], "index": [2]}})
    assert [nc.excludes(u, i) for i, u in enumerate(UUIDS)] == [True, False, True, False]


def test_unknown_keys_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hami.nvidia.config"):
        nc = parse({"name": NODE, "devicesplitcount": 3, "devicesplitcnt": 5})
    assert dict(nc.overrides) == {"device_split_count": 3}
    assert "nodeconfig[0]" in caplog.text and "devicesplitcnt" in caplog.text


@pytest.mark.parametrize(("entry", "where", "words"), [
    ({"name": NODE, "devicesplitcount": "10"}, "devicesplitcount", ["integer", "'10'"]),
    ({"name": NODE, "devicesplitcount": 0}, "devicesplitcount", ["greater than or equal to 1"]),
    ({"name": NODE, "devicesplitcount": 4.5}, "devicesplitcount", ["integer"]),
    ({"name": NODE, "devicesplitcount": 5000}, "devicesplitcount", ["less than or equal to 1024"]),
    ({"name": NODE, "devicememoryscaling": 0}, "devicememoryscaling", ["greater than 0"]),
    ({"name": NODE, "devicememoryscaling": 1000}, "devicememoryscaling", ["less than or equal to 100"]),
    ({"name": NODE, "devicecorescaling": "2"}, "devicecorescaling", ["number"]),
    ({"name": NODE, "preconfigureddevicememory": -1}, "preconfigureddevicememory", ["greater than or equal to 0"]),
    ({"name": NODE, "libcudaloglevel": "verbose"}, "libcudaloglevel", ["non-negative integer"]),
    ({"name": NODE, "enablenumatopology": "true"}, "enablenumatopology", ["boolean"]),
    ({"name": NODE, "enablegetpreferredallocation": 1}, "enablegetpreferredallocation", ["boolean"]),
    ({"name": NODE, "operatingmode": "MIG"}, "operatingmode", ["'MIG'"]),
    ({"name": NODE, "migstrategy": "Mixed"}, "migstrategy", ["'none'", "'Mixed'"]),
    ({"name": NODE, "filterdevices": {"uuid": UUIDS[0]}}, "filterdevices.uuid", ["list"]),
    ({"name": NODE, "filterdevices": {"index": [-1]}}, "filterdevices.index[0]", ["greater than or equal to 0"]),
    ({"name": NODE, "filterdevices": {"indexes": [1]}}, "filterdevices.indexes", ["Extra inputs"]),
    ({"devicesplitcount": 4}, "name", ["required"]),
    ({"name": 7}, "name", ["string"]),
])
def test_a_bad_entry_is_an_error_naming_the_file_and_the_field(entry: dict[str, Any], where: str,
                                                               words: list[str]) -> None:
    # The bad entry is another node's, third in the file: the file is one ConfigMap and is refused whole.
    with pytest.raises(ConfigError) as err:
        parse({"name": NODE}, {"name": "b"}, entry, node=NODE)
    message = str(err.value)
    assert message.startswith(f"{SOURCE}: nodeconfig[2].{where}: ")
    for word in words:
        assert word in message


@pytest.mark.parametrize(("text", "message"), [
    ("[1]", f"{SOURCE}: must be a JSON object with a nodeconfig list, got list"),
    ('{"nodeconfig": {"name": "x"}}', f"{SOURCE}: nodeconfig: must be a list, got dict"),
    ('{"nodeconfig": [{"name": "x"}, "y"]}', f"{SOURCE}: nodeconfig[1]: must be an object, got str"),
])
def test_a_bad_file_shape_is_an_error_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_node_config(text, NODE, SOURCE)
    assert str(err.value) == message


def test_the_file_comes_from_the_environment_and_a_missing_one_means_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.json"
    monkeypatch.setenv(NODE_CONFIG_ENV, str(path))
    assert load_node_config(NODE).entries == ()
    path.write_text(json.dumps({"nodeconfig": [{"name": NODE, "devicesplitcount": 2}]}))
    nc = load_node_config(NODE)
    assert (nc.source, dict(nc.overrides)) == (str(path), {"device_split_count": 2})
    path.write_text('{"nodeconfig": [{"name": "gpu-node", "devicesplitcount": -2}]}')
    with pytest.raises(ConfigError, match=rf"^{path}: nodeconfig\[0\]\.devicesplitcount: "):
        load_node_config(NODE)


@pytest.mark.parametrize(("value", "strategy"), [(None, "none"), ("", "none"), ("none", "none"),
                                                 ("single", "single"), ("mixed", "mixed")])
def test_mig_strategy_from_the_environment(value: str | None, strategy: str) -> None:
    assert mig_strategy({} if value is None else {MIG_STRATEGY_ENV: value}) == strategy


@pytest.mark.parametrize("value", ["Mixed", "all", " single"])
def test_a_bad_mig_strategy_is_an_error_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{MIG_STRATEGY_ENV}: must be one of none, single, mixed, got "):
        mig_strategy({MIG_STRATEGY_ENV: value})


# ------------------------------------------------------------------------------------------ device plugin
@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hnc", dir="/tmp"))  # unix socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


Start = Callable[..., tuple[DevicePluginApp, FakeKubelet, MemoryCluster]]


@pytest.fixture
def start(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    """``start(nodeconfig entries, gpus=[...], nvidia={...})``: a device plugin for NODE on devices-file GPUs
    (``(mig_enabled, numa)`` each, 40960 MiB) with this ``config.json``; the app, the kubelet and the cluster."""
    running: list[tuple[DevicePluginApp, FakeKubelet]] = []
    monkeypatch.setenv("HOOK_PATH", str(short_dir / "hook"))
    monkeypatch.delenv(MIG_STRATEGY_ENV, raising=False)

    def run(entries: list[dict[str, Any]], *, gpus: list[tuple[bool, int]] | None = None,
            nvidia: dict[str, Any] | None = None) -> tuple[DevicePluginApp, FakeKubelet, MemoryCluster]:
        gpus = gpus if gpus is not None else [(False, 0), (False, 1), (False, 0), (False, 1)]
        devices = short_dir / "devices.yaml"
        devices.write_text("devices:\n" + "".join(
            f"  - {{uuid: {UUIDS[i]}, model: NVIDIA A100, memory: 40960, numa: {numa}, mig: {str(mig).lower()}}}\n"
            for i, (mig, numa) in enumerate(gpus)))
        monkeypatch.setenv("HAMI_OVERRIDE_NVIDIA_DEVICES_FILE", str(devices))
        config = short_dir / "config.json"
        config.write_text(json.dumps({"nodeconfig": entries}))
        monkeypatch.setenv(NODE_CONFIG_ENV, str(config))
        cluster = MemoryCluster(nodes=[{"metadata": {"name": NODE, "annotations": {}}}])
        kubelet = FakeKubelet(short_dir / "dp").start()
        pm = get_plugin_manager()
        backend = next(b for b in pm.backends({"nvidia": nvidia or {}}) if b.vendor == "nvidia")
        try:
            app = DevicePluginApp(pm, backend, cluster, NODE, plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05)
        except Exception:
            kubelet.stop()
            raise
        running.append((app, kubelet))
        app.start()
        return app, kubelet, cluster

    yield run
    for app, kubelet in running:
        app.stop()
        kubelet.stop()


def written_registration(cluster: MemoryCluster) -> list[Any]:
    """The devices of the ``hami.io/node-nvidia-register`` annotation the plugin wrote to the node."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        raw = cluster.get_node(NODE)["metadata"].get("annotations", {}).get(keys.NODE_NVIDIA_REGISTER)
        if raw:
            return decode_node_devices_json(raw)
        time.sleep(0.02)
    raise AssertionError("no registration written")


def test_the_nodes_overrides_and_filter_reach_the_registration_and_the_kubelet(start: Start) -> None:
    _app, kubelet, cluster = start([
        {"name": "other", "devicesplitcount": 9},
        {"name": NODE, "devicesplitcount": 4, "devicememoryscaling": 1.5, "devicecorescaling": 2,
         "filterdevices": {"uuid": [UUIDS[0]], "index": [3]}, "enablenumatopology": True,
         "enablegetpreferredallocation": True},
    ], nvidia={"deviceSplitCount": 10, "deviceMemoryScaling": 1, "deviceCoreScaling": 1})
    assert [(d.id, d.index, d.count, d.devmem, d.devcore, d.numa) for d in written_registration(cluster)] == [
        (UUIDS[1], 1, 4, 61440, 200, 1), (UUIDS[2], 2, 4, 61440, 200, 0)]
    reg = kubelet.next_registration()
    assert reg.options.get_preferred_allocation_available is True
    with kubelet.connect(reg.endpoint) as client:
        stream = client.list_and_watch()
        listed = next(stream).devices
        stream.cancel()
    assert [d.ID for d in listed] == [f"{UUIDS[1]}-{i}" for i in range(4)] + [f"{UUIDS[2]}-{i}" for i in range(4)]
    assert {d.ID: [n.ID for n in d.topology.nodes] for d in listed}[f"{UUIDS[1]}-0"] == [1]


def test_without_an_entry_the_nvidia_section_applies(start: Start) -> None:
    _app, kubelet, cluster = start([{"name": "other", "devicesplitcount": 2, "filterdevices": {"index": [0]}}],
                                  gpus=[(False, 0), (False, 1)], nvidia={"deviceSplitCount": 3})
    assert [(d.id, d.count, d.devmem, d.devcore) for d in written_registration(cluster)] == [
        (UUIDS[0], 3, 40960, 100), (UUIDS[1], 3, 40960, 100)]
    reg = kubelet.next_registration()
    assert reg.options.get_preferred_allocation_available is False
    with kubelet.connect(reg.endpoint) as client:
        stream = client.list_and_watch()
        assert not next(stream).devices[0].HasField("topology")
        stream.cancel()


def test_allocate_uses_the_nodes_memory_scaling_and_log_level(start: Start) -> None:
    _app, kubelet, cluster = start([{"name": NODE, "devicememoryscaling": 2, "libcudaloglevel": "4"}],
                                  gpus=[(False, 0)], nvidia={"deviceSplitCount": 2, "libCudaLogLevel": 1})
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: "2025-01-01T00:00:00Z,ml,train"}}})
    cluster.add_pod({"metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "annotations": {
        keys.VGPU_DEVICES_TO_ALLOCATE: f"{UUIDS[0]},NVIDIA,3000,30:;", keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: "1", keys.VGPU_NODE: NODE}}, "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        "status": {"phase": "Pending"}})
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        (ctr,) = client.allocate([f"{UUIDS[0]}-1"]).container_responses
    envs = dict(ctr.envs)
    assert (envs["CUDA_OVERSUBSCRIBE"], envs["LIBCUDA_LOG_LEVEL"]) == ("true", "4")


def test_a_bad_node_config_stops_the_device_plugin_with_the_field_named(start: Start) -> None:
    with pytest.raises(ConfigError, match=r"config\.json: nodeconfig\[0\]\.devicesplitcount: "):
        start([{"name": NODE, "devicesplitcount": "four"}])


# ------------------------------------------------------------------------------------------ MIG strategy
@pytest.mark.parametrize(("strategy", "served"), [(None, [0, 1, 2]), ("none", [0, 1, 2]), ("mixed", [1])])
def test_mig_enabled_gpus_are_served_as_gpus_only_with_strategy_none(
        start: Start, monkeypatch: pytest.MonkeyPatch, strategy: str | None, served: list[int]) -> None:
    if strategy is not None:
        monkeypatch.setenv(MIG_STRATEGY_ENV, strategy)
    _app, _kubelet, cluster = start([], gpus=[(True, 0), (False, 0), (True, 1)])
    assert [d.id for d in written_registration(cluster)] == [UUIDS[i] for i in served]


@pytest.mark.parametrize(("mig", "served"), [(True, []), (False, UUIDS[:2])])
def test_strategy_single_serves_no_mig_enabled_gpu_as_a_gpu(start: Start, monkeypatch: pytest.MonkeyPatch,
                                                            mig: bool, served: list[str]) -> None:
    monkeypatch.setenv(MIG_STRATEGY_ENV, "single")
    app, _kubelet, _cluster = start([], gpus=[(mig, 0), (mig, 1)])
    assert [d.id for d in app.devices] == served


def test_strategy_single_refuses_a_node_with_mig_and_non_mig_gpus(start: Start,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIG_STRATEGY_ENV, "single")
    with pytest.raises(ConfigError, match="same migEnabled value"):
        start([], gpus=[(True, 0), (False, 0)])


def test_a_filtered_gpu_does_not_count_for_strategy_single(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIG_STRATEGY_ENV, "single")
    _app, _kubelet, cluster = start([{"name": NODE, "filterdevices": {"index": [0]}}], gpus=[(True, 0), (False, 0)])
    assert [d.id for d in written_registration(cluster)] == [UUIDS[1]]


def test_a_bad_mig_strategy_stops_the_device_plugin(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIG_STRATEGY_ENV, "Mixed")
    with pytest.raises(ConfigError, match=MIG_STRATEGY_ENV):
        start([])


def test_the_nodeconfig_migstrategy_is_not_applied(start: Start, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hami.nvidia.node"):
        _app, _kubelet, cluster = start([{"name": NODE, "migstrategy": "mixed"}], gpus=[(True, 0), (False, 0)])
    assert [d.id for d in written_registration(cluster)] == UUIDS[:2]
    assert "migstrategy 'mixed' is not applied" in caplog.text
