"""Device scores and device ordering (spec §7.1-§7.2, Appendix C) and the standard fit's reasons."""

from __future__ import annotations

import pytest

from hami_core.engine.policy import device_score, effective_policy, sort_devices
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.fit import standard_fit
from hami_core.plugins.types import DeviceInfo, DeviceRequest, DeviceUsage, GpuPolicy


def usage(id: str, used: int = 0, usedmem: int = 0, usedcores: int = 0, *, count: int = 10, devmem: int = 100,
          numa: int = 0, index: int = 0, type: str = "T", pair: dict[str, int] | None = None) -> DeviceUsage:
    info = DeviceInfo(id, index=index, count=count, devmem=devmem, devcore=100, type=type, numa=numa, health=True,
                      pair_scores=pair)
    return DeviceUsage(info, used, usedmem, usedcores)


def test_device_score_vectors() -> None:
    """Appendix C: gpu-a 16 / 26, gpu-b 15 / 27 with a 40 % request whose type equals the device type."""
    req = DeviceRequest("T", 1, 0, 40, 0)
    a, b = usage("gpu-a", 1, 10, 90), usage("gpu-b", 7, 20, 10)
    assert device_score(a, [req], (1, 1, 1)) == pytest.approx(16)
    assert device_score(b, [req], (1, 1, 1)) == pytest.approx(15)
    assert device_score(a, [req], (1, 1, 3)) == pytest.approx(26)
    assert device_score(b, [req], (1, 1, 3)) == pytest.approx(27)
    binpack = GpuPolicy(gpu="binpack", gpu_tokens=("binpack",), weights=(1, 1, 3))
    spread = GpuPolicy(gpu="spread", gpu_tokens=("spread",), weights=(1, 1, 3))
    assert sort_devices([a, b], [req], binpack)[-1].id == "gpu-b"
    assert sort_devices([a, b], [req], spread)[-1].id == "gpu-a"


def test_request_term_counts_only_for_equal_type() -> None:
    """Quirk §12.1.2: an NVIDIA request never matches a model-named device, so only usage counts."""
    dev = usage("d", 2, 2048, 1, count=10, devmem=8192)
    dev.totalcore = 4
    assert device_score(dev, [DeviceRequest("NVIDIA", 1, 4000, 101, 50)], (1, 1, 1)) == pytest.approx(7.0)
    assert device_score(usage("z", count=0), [], (1, 1, 1)) == 0.0


def test_numa_chain_and_mutex_orders() -> None:
    d0 = usage("d0", 3, numa=1, index=0)
    d1 = usage("d1", 1, numa=0, index=1)
    d2 = usage("d2", 0, numa=0, index=2)
    chain = GpuPolicy(gpu="numa,binpack", gpu_tokens=("numa", "binpack"))
    assert [d.id for d in sort_devices([d0, d1, d2], [], chain)] == ["d2", "d1", "d0"]
    mutex = GpuPolicy(gpu="mutex", gpu_tokens=("mutex",))
    assert sort_devices([d0, d1, d2], [], mutex)[-1].id == "d2"  # idle last ⇒ tried first
    bind = GpuPolicy(gpu="spread", gpu_tokens=("spread",), numa_bind=True)
    assert [d.numa for d in sort_devices([d0, d1, d2], [], bind)] == [0, 0, 1]


def test_effective_policy_reads_annotations() -> None:
    p = effective_policy({"hami.io/gpu-scheduler-policy": "binpack,numa", "hami.io/node-scheduler-policy": "spread"},
                         node_default="binpack", gpu_default="spread")
    assert (p.node, p.gpu, p.gpu_tokens) == ("spread", "binpack,numa", ("binpack", "numa"))
    with pytest.raises(WireFormatError):
        effective_policy({"hami.io/device-scoring-weights": "slot=0,core=0,memory=0"}, node_default="binpack",
                         gpu_default="spread")
    # present but empty is an error too, as in HAMi; only an absent key means the default weights
    with pytest.raises(WireFormatError, match='annotation "": expected slot, core, and memory weights'):
        effective_policy({"hami.io/device-scoring-weights": ""}, node_default="binpack", gpu_default="spread")
    assert effective_policy({}, node_default="binpack", gpu_default="spread").weights == (1, 1, 1)


def test_standard_fit_reasons_are_counted_per_device() -> None:
    devs = [usage("a", devmem=100), usage("b", devmem=1000)]
    res = standard_fit(devs, DeviceRequest("T", 1, 500), uuid_ok=lambda d: d.id != "b")
    assert res.reason == "1/2 CardInsufficientMemory, 1/2 CardUuidMismatch"
    ok = standard_fit(devs, DeviceRequest("T", 1, 50))
    assert [d.uuid for d in ok.devices] == ["b"]  # the last device is tried first


def test_standard_fit_topology_pick() -> None:
    """spec B.10: scores 0-1:100, 0-2:200, 1-2:150 ⇒ one card: dev-1; two cards: dev-0 + dev-2."""
    s = {"dev-0": {"dev-1": 100, "dev-2": 200}, "dev-1": {"dev-0": 100, "dev-2": 150},
         "dev-2": {"dev-0": 200, "dev-1": 150}}
    devs = [usage(k, index=i, pair=s[k]) for i, k in enumerate(s)]
    one = standard_fit(devs, DeviceRequest("T", 1, 1), topology=True)
    assert [d.uuid for d in one.devices] == ["dev-1"]
    two = standard_fit(devs, DeviceRequest("T", 2, 1), topology=True)
    assert sorted(d.uuid for d in two.devices) == ["dev-0", "dev-2"]


def _dev(id: str, **kw: object) -> DeviceUsage:
    used = kw.pop("used", 0)
    usedmem = kw.pop("usedmem", 0)
    usedcores = kw.pop("usedcores", 0)
    health = kw.pop("health", True)
    info = DeviceInfo(id, count=kw.pop("count", 10), devmem=kw.pop("devmem", 1000), devcore=100, type="T",
                      numa=kw.pop("numa", 0), health=health)  # type: ignore[arg-type]
    return DeviceUsage(info, used, usedmem, usedcores)  # type: ignore[arg-type]


@pytest.mark.parametrize(("devices", "request_", "options", "expected"), [
    ([_dev("a", health=False)], DeviceRequest("T", 1, 10), {}, "1/1 CardNotHealth"),
    ([_dev("a")], DeviceRequest("T", 1, 10), {"cordoned": {"a"}}, "1/1 CardCordoned"),
    ([_dev("a")], DeviceRequest("T", 1, 10), {"type_ok": lambda d: False}, "1/1 CardTypeMismatch"),
    ([_dev("a")], DeviceRequest("T", 1, 10), {"uuid_ok": lambda d: False}, "1/1 CardUuidMismatch"),
    ([_dev("a", used=10)], DeviceRequest("T", 1, 10), {}, "1/1 CardTimeSlicingExhausted"),
    ([_dev("a", used=1)], DeviceRequest("T", 1, 10), {"mutex": True}, "1/1 ExclusiveDeviceAllocateConflict"),
    ([_dev("a")], DeviceRequest("T", 1, 10), {"quota": lambda d, m, c, chosen: False}, "1/1 ResourceQuotaNotFit"),
    ([_dev("a", usedmem=995)], DeviceRequest("T", 1, 10), {}, "1/1 CardInsufficientMemory"),
    ([_dev("a", usedcores=90)], DeviceRequest("T", 1, 10, coresreq=20), {}, "1/1 CardInsufficientCore"),
    ([_dev("a", used=1)], DeviceRequest("T", 1, 10, coresreq=100), {}, "1/1 ExclusiveDeviceAllocateConflict"),
    ([_dev("a", usedcores=100)], DeviceRequest("T", 1, 10), {}, "1/1 CardComputeUnitsExhausted"),
    ([_dev("a")], DeviceRequest("T", 1, 10), {"custom_rule": lambda d, m, c, chosen: False},
     "1/1 CardNotFoundCustomFilterRule"),
    ([_dev("a")], DeviceRequest("T", 2, 10), {}, "1/1 AllocatedCardsInsufficientRequest"),
    ([_dev("a", numa=0), _dev("b", numa=1)], DeviceRequest("T", 2, 10), {"numa_bind": True},
     "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit"),
    ([], DeviceRequest("T", 1, 10), {}, "NodeInsufficientDevice"),
])
def test_every_reason_word(devices: list[DeviceUsage], request_: DeviceRequest, options: dict[str, object],
                           expected: str) -> None:
    result = standard_fit(devices, request_, **options)  # type: ignore[arg-type]
    assert not result.ok
    assert result.reason == expected
