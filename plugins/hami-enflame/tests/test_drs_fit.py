"""Enflame DRS fit: profile choice, device checks and the booked profile (device.go Fit; vendors I tests)."""

from __future__ import annotations

from enflame_testlib import backends, drs_usage

from hami_core.plugins.types import DeviceRequest, FitResult

DIRECT_3 = DeviceRequest("Enflame", 1, 3, 0, 0)
SPEC_20G_40 = DeviceRequest("Enflame", 1, 20480, -1, 40)

#: :meth:`DrsBackend.fit` of the default section's backend
drs_fit = backends()[1].fit


def _one(result: FitResult) -> tuple:
    assert result.ok, result.reason
    (d,) = result.devices
    return d.uuid, d.usedmem, d.usedcores, d.custom_info["profileName"], d.custom_info["drsSlice"]


def test_direct_three_slices_is_profile_3g_20gb() -> None:
    # Notable test: drs-gcu 3 → 3g.20gb, 20480 MiB, 50 % cores.
    got = drs_fit([drs_usage("d0")], DIRECT_3, {})
    assert _one(got) == ("d0", 20480, 50, "3g.20gb", 3)
    assert got.devices[0].custom_info == {"profileName": "3g.20gb", "profileID": "1", "minor": "0", "index": "0",
                                          "drsSlice": 3, "requestMem": 0, "requestCore": 0}


def test_spec_20480_mib_40_percent_is_the_same_profile() -> None:
    # Notable test: 20480 MiB / 40 % → 3g.20gb (20480 > 2 * 40 GB, so MiB, rounded up to 20 GB).
    got = drs_fit([drs_usage("d0")], SPEC_20G_40, {})
    assert _one(got) == ("d0", 20480, 50, "3g.20gb", 3)
    assert (got.devices[0].custom_info["requestMem"], got.devices[0].custom_info["requestCore"]) == (20, 40)


def test_spec_small_numbers_are_gb_and_pick_the_smallest_profile() -> None:
    assert _one(drs_fit([drs_usage("d0")], DeviceRequest("Enflame", 1, 6, -1, 0), {}))[3] == "1g.6gb"
    assert _one(drs_fit([drs_usage("d0")], DeviceRequest("Enflame", 1, 21, -1, 0), {}))[3] == "6g.40gb"
    assert _one(drs_fit([drs_usage("d0")], DeviceRequest("Enflame", 1, 0, -1, 51), {}))[3] == "6g.40gb"
    assert _one(drs_fit([drs_usage("d0")], DeviceRequest("Enflame", 1, 0, -1, 17), {}))[3] == "1g.6gb"


def test_no_profile_is_mode_not_fit() -> None:
    devs = [drs_usage("d0"), drs_usage("d1", index=1)]
    assert drs_fit(devs, DeviceRequest("Enflame", 1, 2, 0, 0), {}).reason == "1/2 ModeNotFit"
    assert drs_fit(devs, DeviceRequest("Enflame", 1, 41, -1, 0), {}).reason == "1/2 ModeNotFit"
    assert drs_fit([drs_usage("d0", profiles={})], DIRECT_3, {}).reason == "1/1 ModeNotFit"


def test_device_checks_and_reasons() -> None:
    devs = [
        drs_usage("sick", health=False),
        drs_usage("full", count=2, used=2, usedmem=12288, usedcores=34),
        drs_usage("mem", used=1, usedmem=24576, usedcores=17),
        drs_usage("core", used=1, usedmem=0, usedcores=60),
        drs_usage("banned"),
    ]
    got = drs_fit(devs, DIRECT_3, {"enflame.com/nouse-gpuuuid": "banned"})
    assert got.reason == ("1/5 CardInsufficientCore, 1/5 CardInsufficientMemory, 1/5 CardNotHealth, "
                          "1/5 CardTimeSlicingExhausted, 1/5 CardUuidMismatch")


def test_uuid_selection_and_preferred_order() -> None:
    devs = [drs_usage("d0"), drs_usage("d1", index=1)]
    assert _one(drs_fit(devs, DIRECT_3, {}))[0] == "d1"
    assert _one(drs_fit(devs, DIRECT_3, {"enflame.com/use-gpuuuid": " d0 ,x"}))[0] == "d0"


def test_mutex_refuses_busy_devices() -> None:
    devs = [drs_usage("d0", used=1, usedmem=6144, usedcores=17)]
    assert drs_fit(devs, DIRECT_3, {}, mutex=True).reason == "1/1 ExclusiveDeviceAllocateConflict"
    assert drs_fit(devs, DIRECT_3, {}).ok


def test_extra_slices_of_earlier_containers_count_as_used() -> None:
    # HAMi AddResourceUsage adds the slice count: 3 slices taken earlier in this pod + 1 booked = 4 of 4.
    devs = [drs_usage("d0", count=4, used=1, usedmem=6144, usedcores=17)]
    assert drs_fit(devs, DeviceRequest("Enflame", 1, 1, 0, 0), {}, extra_used={"d0": 2}).ok
    assert drs_fit(devs, DeviceRequest("Enflame", 1, 1, 0, 0), {},
                      extra_used={"d0": 3}).reason == "1/1 CardTimeSlicingExhausted"
