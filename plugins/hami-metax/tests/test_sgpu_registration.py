"""MetaX sGPU node registration ``metax-tech.com/node-gpu-devices`` and health (vendors G.2, protocol_test.go)."""

from __future__ import annotations

import json

import pytest
from metax_testlib import Clock, backends, make_engine, sdev, sgpu_node

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo, HealthReport
from hami_metax import sgpu as mx

# getMetaxSDevices "test normal node" (sdevice_test.go), spacing as in the test.
HAMI_SAMPLE = ('[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, '
               '"bdf": "0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true, "qosPolicy": "fixed-share"}]')


def test_hami_sample_decodes_every_field() -> None:
    assert mx.decode_sgpu_devices(HAMI_SAMPLE) == [mx.SgpuDevice(
        uuid="GPU-123", bdf="0000:44:00.0", model="sgpu", total_dev_count=16, total_compute=100, total_vram=32768,
        available_dev_count=0, available_compute=0, available_vram=0, numa=1, healthy=True, qos_policy="fixed-share",
        link_zone=0)]


def test_registration_maps_to_hami_devices(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    raw = json.dumps([sdev("GPU-a", qos="fixed-share", zone=1, numa=1, availableDevCount=15),
                      sdev("GPU-b", count=8, vram=65536, compute=100, healthy=False, zone=2, model="MXC500")])
    status = engine.upsert_node(sgpu_node("s1", raw=raw))
    assert status.devices == {"Metax-SGPU": 2}
    assert status.errors == {}
    assert [d.info for d in engine.nodes["s1"].devices["Metax-SGPU"]] == [
        DeviceInfo(id="GPU-a", index=0, count=16, devmem=32768, devcore=100, type="Metax-SGPU", numa=1, mode="",
                   health=True, custom_info={"QosPolicy": "fixed-share", "Model": "sgpu", "LinkZone": 1},
                   vendor="Metax-SGPU"),
        DeviceInfo(id="GPU-b", index=1, count=8, devmem=65536, devcore=100, type="Metax-SGPU", numa=0, mode="",
                   health=False, custom_info={"QosPolicy": "", "Model": "MXC500", "LinkZone": 2},
                   vendor="Metax-SGPU"),
    ]


def test_keys_match_case_insensitively_like_go() -> None:
    (dev,) = mx.decode_sgpu_devices('[{"UUID":"GPU-1","TotalDevCount":4,"totalvram":1024,"Healthy":true,'
                                    '"QOSPOLICY":"burst-share","LinkZone":3}]')
    assert (dev.uuid, dev.total_dev_count, dev.total_vram, dev.healthy, dev.qos_policy, dev.link_zone) == (
        "GPU-1", 4, 1024, True, "burst-share", 3)


def test_encoder_round_trips_and_omits_zero_fields() -> None:
    devices = [mx.SgpuDevice("GPU-1", model="sgpu", total_dev_count=16, total_compute=100, total_vram=32768,
                             healthy=True, qos_policy="best-effort", link_zone=1), mx.SgpuDevice("GPU-2")]
    text = mx.encode_sgpu_devices(devices)
    assert text == ('[{"uuid":"GPU-1","model":"sgpu","totalDevCount":16,"totalCompute":100,"totalVRam":32768,'
                    '"healthy":true,"qosPolicy":"best-effort","linkZone":1},{"uuid":"GPU-2"}]')
    assert mx.decode_sgpu_devices(text) == devices


@pytest.mark.parametrize(("raw", "message"), [
    ("", 'metax-tech.com/node-gpu-devices: invalid JSON'),                      # "test Unmarshal fail"
    ("{", "metax-tech.com/node-gpu-devices: invalid JSON"),
    ('{"uuid":"GPU-1"}', "metax-tech.com/node-gpu-devices: expected a JSON array of devices"),
    ('[{"uuid":""}]', 'metax-tech.com/node-gpu-devices: device 0: field "uuid" must be a non-empty string'),
    ('[{"model":"sgpu"}]', 'metax-tech.com/node-gpu-devices: device 0: field "uuid" must be a non-empty string'),
    ('[{"uuid":"a"},7]', "metax-tech.com/node-gpu-devices: device 1: must be an object, got 7"),
    ('[{"uuid":"a","totalDevCount":"16"}]',
     'metax-tech.com/node-gpu-devices: device 0: field "totalDevCount" must be an integer, got "16"'),
    ('[{"uuid":"a","totalVRam":-1}]',
     'metax-tech.com/node-gpu-devices: device 0: field "totalVRam" must not be negative, got -1'),
    ('[{"uuid":"a","totalCompute":2147483648}]',
     'metax-tech.com/node-gpu-devices: device 0: field "totalCompute" out of range for int32'),
    ('[{"uuid":"a","healthy":"true"}]',
     'metax-tech.com/node-gpu-devices: device 0: field "healthy" must be a boolean'),
    ('[{"uuid":"a","linkZone":1.5}]',
     'metax-tech.com/node-gpu-devices: device 0: field "linkZone" must be an integer'),
])
def test_malformed_registration_names_the_annotation(raw: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        mx.decode_sgpu_devices(raw)
    assert str(info.value).startswith(message)


def test_malformed_registration_is_an_error_and_unhealthy(clock: Clock) -> None:
    # HAMi: CheckHealth decodes the annotation again and finds no device (len 0): unhealthy, the node's sGPUs are
    # cleaned up (a handshake-checked backend would keep them while its handshake is fresh).
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-a"), sdev("GPU-b")]))
    status = engine.upsert_node(sgpu_node("s1", raw='[{"uuid": "GPU-a", "totalDevCount": "lots"}]'))
    assert status.devices == {}
    assert status.errors["Metax-SGPU"].startswith('metax-tech.com/node-gpu-devices: device 0: field "totalDevCount"')
    assert status.unhealthy == {"Metax-SGPU": "metax-tech.com/node-gpu-devices lists no device"}


@pytest.mark.parametrize("raw", ["[]", "null"])   # "test devices len 0"
def test_no_device_is_unhealthy(clock: Clock, raw: str) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-a")]))
    status = engine.upsert_node(sgpu_node("s1", raw=raw))
    assert status.devices == {}
    assert status.unhealthy == {"Metax-SGPU": "metax-tech.com/node-gpu-devices lists no device"}
    assert status.patch == {}


def test_no_annotation_means_no_sgpu(clock: Clock) -> None:   # "test annotations nil"
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-a")]))
    status = engine.upsert_node(sgpu_node("s1", None))
    assert status.devices == {}
    assert status.unhealthy == {}


def test_health_is_at_least_one_device() -> None:
    _, sgpu = backends()
    node = sgpu_node("s1", [sdev("GPU-a", healthy=False)])
    devices = sgpu.hami_node_devices(node)
    # An unhealthy card still registers: the fit refuses it (CardUnhealthy), the node stays healthy.
    assert sgpu.hami_node_health(node, devices) == HealthReport(True, True)
    assert sgpu.hami_node_health(node, []).healthy is False
    assert sgpu.hami_node_health(sgpu_node("s2", None), []) == HealthReport(True, False)


def test_registration_confirms_jittery_qos(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    sgpu = engine.backends["Metax-SGPU"]
    sgpu.jittery.add("GPU-a", "best-effort")
    sgpu.jittery.add("GPU-b", "burst-share")
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-a", qos="best-effort"), sdev("GPU-b", qos="best-effort")]))
    assert sgpu.jittery.snapshot() == {"GPU-b": "burst-share"}
    # A registration that cannot be read confirms nothing.
    engine.upsert_node(sgpu_node("s1", raw='[{"uuid":"GPU-b","qosPolicy":"burst-share","numa":"x"}]'))
    assert sgpu.jittery.snapshot() == {"GPU-b": "burst-share"}
