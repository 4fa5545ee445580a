"""NVIDIA discovery: pynvml mocked at its boundary (a fake module object), the devices file, the isolated probe."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from nvidia_testlib import parse_config

from hami_nvidia import detect
from hami_nvidia.node import IGNORED_XIDS, device_infos, ignored_xids

UUID0 = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
UUID1 = "GPU-1a1b1c1d-0000-1111-2222-333344445555"


class NVMLError(Exception):
    pass


class NVMLError_Timeout(NVMLError):
    pass


def fake_nvml(*, memory_error: bool = False) -> types.SimpleNamespace:
    gpus = [{"uuid": UUID0, "name": "NVIDIA A100-SXM4-80GB", "mem": 80 * 1024**3, "bus": "00000000:3B:00.0"},
            {"uuid": UUID1.encode(), "name": b"Tesla T4", "mem": 16 * 1024**3, "bus": "00000000:AF:00.0"}]
    calls: list[str] = []

    def mem(h):
        if memory_error and h == 1:
            raise NVMLError("Not Supported")
        return types.SimpleNamespace(total=gpus[h]["mem"])

    def mig(h):
        raise NVMLError("Not Supported")

    return types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_Timeout=NVMLError_Timeout, calls=calls,
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: gpus[h]["uuid"], nvmlDeviceGetIndex=lambda h: h,
        nvmlDeviceGetName=lambda h: gpus[h]["name"], nvmlDeviceGetMemoryInfo=mem,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=gpus[h]["bus"].encode()),
        nvmlDeviceGetMinorNumber=lambda h: h, nvmlDeviceGetMigMode=mig)


def test_probe_nvml_with_fake_module(tmp_path: Path) -> None:
    (tmp_path / "0000:af:00.0").mkdir()
    (tmp_path / "0000:af:00.0" / "numa_node").write_text("1\n")
    nvml = fake_nvml()
    gpus = detect.probe_nvml(nvml, sys_pci=str(tmp_path))
    assert gpus == [detect.Gpu(UUID0, 0, "NVIDIA A100-SXM4-80GB", 81920, 0, 0, False),
                    detect.Gpu(UUID1, 1, "NVIDIA-Tesla T4", 16384, 1, 1, False)]
    assert nvml.calls == ["init", "shutdown"]


def test_memory_not_supported_uses_preconfigured() -> None:
    gpus = detect.probe_nvml(fake_nvml(memory_error=True), pre_configured_memory_mib=12345, sys_pci="/nonexistent")
    assert [g.memory_mib for g in gpus] == [81920, 12345]


def test_devices_file_and_registration_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "devices.yaml"
    f.write_text(f"devices:\n  - {{uuid: {UUID0}, model: Tesla T4, memory: 15360, numa: 1}}\n")
    monkeypatch.setenv(detect.OVERRIDE_ENV, str(f))
    gpus = detect.discover()
    assert gpus == [detect.Gpu(UUID0, 0, "NVIDIA-Tesla T4", 15360, 1)]
    cfg = parse_config({"deviceSplitCount": 4, "deviceMemoryScaling": 1.5, "deviceCoreScaling": 2})
    (info,) = device_infos(cfg, gpus)
    assert (info.id, info.count, info.devmem, info.devcore, info.type, info.numa, info.mode, info.health) == (
        UUID0, 4, 23040, 200, "NVIDIA-Tesla T4", 1, "hami-core", True)


def test_bad_devices_file(tmp_path: Path) -> None:
    f = tmp_path / "devices.yaml"
    f.write_text("devices: [{model: x}]\n")
    with pytest.raises(ValueError, match="needs at least a uuid"):
        detect.load_devices_file(f)


def test_probe_subprocess_without_pynvml_gives_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(detect.OVERRIDE_ENV, raising=False)
    # pynvml is not installed in CI; on a GPU machine with it, the probe's answer is a list either way.
    assert isinstance(detect.discover(refresh=True, timeout_s=20), list)


def test_ignored_xids_env() -> None:
    assert ignored_xids({}) == IGNORED_XIDS
    assert ignored_xids({"DP_DISABLE_HEALTHCHECKS": "all"}) is None
    assert ignored_xids({"DP_DISABLE_HEALTHCHECKS": "79"}) == IGNORED_XIDS | {79}
    assert ignored_xids({"DP_DISABLE_HEALTHCHECKS": "xids", "DP_ENABLE_HEALTHCHECKS": "13"}) == IGNORED_XIDS - {13}
