"""Keys, nouse_key, Go bool/int parsing and comma lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.wire import keys
from hami_core.wire.common import INT32_MAX, INT32_MIN, parse_go_bool, parse_go_int, split_list


def test_key_values_follow_spec_3_1() -> None:
    assert keys.VGPU_NODE == "hami.io/vgpu-node"
    assert keys.VGPU_TIME == "hami.io/vgpu-time"
    assert keys.VGPU_DEVICES_TO_ALLOCATE == "hami.io/vgpu-devices-to-allocate"
    assert keys.VGPU_DEVICES_ALLOCATED == "hami.io/vgpu-devices-allocated"
    assert keys.VGPU_MIG_ALLOCATIONS == "hami.io/vgpu-mig-allocations"
    assert keys.BIND_PHASE == "hami.io/bind-phase"
    assert keys.BIND_TIME == "hami.io/bind-time"
    assert (keys.BIND_PHASE_ALLOCATING, keys.BIND_PHASE_SUCCESS, keys.BIND_PHASE_FAILED) == (
        "allocating", "success", "failed")
    assert keys.NODE_SCHEDULER_POLICY == "hami.io/node-scheduler-policy"
    assert keys.GPU_SCHEDULER_POLICY == "hami.io/gpu-scheduler-policy"
    assert keys.DEVICE_SCORING_WEIGHTS == "hami.io/device-scoring-weights"
    assert keys.NODE_LOCK == "hami.io/mutex.lock"
    assert keys.NODE_HANDSHAKE == "hami.io/node-handshake"
    assert keys.NODE_NVIDIA_REGISTER == "hami.io/node-nvidia-register"
    assert keys.NODE_NVIDIA_SCORE == "hami.io/node-nvidia-score"
    assert keys.DEVICE_CORDON == "hami.io/device-cordon"
    assert keys.NVIDIA_USE_GPUTYPE == "nvidia.com/use-gputype"
    assert keys.NVIDIA_NOUSE_GPUTYPE == "nvidia.com/nouse-gputype"
    assert keys.NVIDIA_USE_GPUUUID == "nvidia.com/use-gpuuuid"
    assert keys.NVIDIA_NOUSE_GPUUUID == "nvidia.com/nouse-gpuuuid"
    assert keys.NVIDIA_NUMA_BIND == "nvidia.com/numa-bind"
    assert keys.NVIDIA_VGPU_MODE == "nvidia.com/vgpu-mode"
    assert (keys.WEBHOOK_LABEL, keys.WEBHOOK_IGNORE) == ("hami.io/webhook", "ignore")
    assert keys.POD_GROUP_LABEL == "scheduling.x-k8s.io/pod-group"
    assert keys.SCHEDULER_ROLE_LABEL == "hami.io/scheduler-role"
    assert keys.DEFAULT_SCHEDULER_NAME == "hami-scheduler"


@pytest.mark.parametrize(("use", "nouse"), [
    (keys.NVIDIA_USE_GPUTYPE, keys.NVIDIA_NOUSE_GPUTYPE),
    (keys.NVIDIA_USE_GPUUUID, keys.NVIDIA_NOUSE_GPUUUID),
    ("cambricon.com/use-mlutype", "cambricon.com/nouse-mlutype"),
    ("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),
    ("hami.io/use-BI-V150-uuid", "hami.io/no-use-BI-V150-uuid"),
    ("hami.io/use-Ascend910B3-uuid", "hami.io/no-use-Ascend910B3-uuid"),
    ("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
    ("vastaitech.com/use-va", "vastaitech.com/nouse-va"),
    ("amd.com/use-gpu-uuid", "amd.com/nouse-gpu-uuid"),
])
def test_nouse_key(use: str, nouse: str) -> None:
    assert keys.nouse_key(use) == nouse


def test_nouse_key_rejects_non_use_key() -> None:
    with pytest.raises(WireFormatError, match=r"hami\.io/vgpu-node"):
        keys.nouse_key(keys.VGPU_NODE)


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_bool_true(text: str) -> None:
    assert parse_go_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_bool_false(text: str) -> None:
    assert parse_go_bool(text) is False


@pytest.mark.parametrize("text", ["", "yes", "tRUE", " true", "2", "on"])
def test_go_bool_rejects(text: str) -> None:
    with pytest.raises(WireFormatError, match="invalid syntax"):
        parse_go_bool(text)


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("+7", 7), ("-12", -12), ("007", 7)])
def test_go_int(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize("text", ["", " 1", "1 ", "1_000", "0x10", "1.0", "\u0661", "+", "--1"])
def test_go_int_rejects_syntax(text: str) -> None:
    with pytest.raises(WireFormatError, match="invalid syntax"):
        parse_go_int(text)


def test_go_int_range() -> None:
    assert parse_go_int(str(INT32_MAX), INT32_MIN, INT32_MAX) == INT32_MAX
    with pytest.raises(WireFormatError, match="value out of range"):
        parse_go_int(str(INT32_MAX + 1), INT32_MIN, INT32_MAX)


@pytest.mark.parametrize(("value", "items"), [
    (None, ()),
    ("", ()),
    ("   ", ()),
    ("a100, h100", ("a100", "h100")),
    (" GPU-a , GPU-b", ("GPU-a", "GPU-b")),
    ("A100,,H100,", ("A100", "H100")),
])
def test_split_list(value: str | None, items: tuple[str, ...]) -> None:
    assert split_list(value) == items


@given(st.lists(st.text(st.characters(blacklist_characters=","), min_size=1).map(str.strip).filter(bool)))
def test_split_list_round_trip(items: list[str]) -> None:
    assert split_list(", ".join(items)) == tuple(items)
