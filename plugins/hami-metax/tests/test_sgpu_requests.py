"""MetaX sGPU requests: count, vcore (default 100) and vmemory in GiB or with a unit (vendors G.2,
TestGenerateResourceRequests)."""

from __future__ import annotations

import pytest
from metax_testlib import SGPU, VCORE, VMEMORY, container, make_engine, make_pod, sgpu_container

from hami_core.plugins.types import DeviceRequest


def sgpu(nums: int, mem: int, pct: int, cores: int) -> DeviceRequest:
    return DeviceRequest("Metax-SGPU", nums, mem, pct, cores)


@pytest.mark.parametrize(("ctr", "expected"), [
    # The Go test table.
    (sgpu_container(count=1), sgpu(1, 0, 100, 100)),                                  # one full sgpu
    (sgpu_container(count=2), sgpu(2, 0, 100, 100)),                                  # two full sgpu
    (sgpu_container(count=1, cores=30), sgpu(1, 0, 100, 30)),                         # set vcore
    (sgpu_container(count=1, mem=16), sgpu(1, 16384, 0, 100)),                        # set vmemory (GiB)
    (sgpu_container(count=1, mem=16, cores=60), sgpu(1, 16384, 0, 60)),
    (sgpu_container(count=1, mem="1024Mi", cores=60), sgpu(1, 1024, 0, 60)),          # unit Mi
    (sgpu_container(count=1, mem="16Gi", cores=60), sgpu(1, 16384, 0, 60)),           # unit Gi
    # Bounds and units.
    (sgpu_container(count=1, mem=2097151), sgpu(1, 2097151 * 1024, 0, 100)),          # MaxInt32 / 1024
    (sgpu_container(count=1, mem="1.5Gi"), sgpu(1, 1536, 0, 100)),                    # whole number of bytes
    (sgpu_container(count=1, mem="1e9"), sgpu(1, 953, 0, 100)),                       # exponent = a unit
    (sgpu_container(count=1, mem="1000Ki"), sgpu(1, 0, 100, 100)),                    # < 1 MiB ⇒ whole card
    (sgpu_container(count=1, mem="-1Ki"), sgpu(1, 0, 100, 100)),                      # Go truncates toward 0
    (sgpu_container(count=1, cores=0), sgpu(1, 0, 100, 0)),
    (sgpu_container(count=1, cores=150), sgpu(1, 0, 100, 150)),                       # no clamp here
    (container(limits={SGPU: 1, VMEMORY: 8, VCORE: 25}), sgpu(1, 8192, 0, 25)),       # YAML integers
    # Non-integer quantities are ignored rather than dropping the request.
    (sgpu_container(count=1, mem="1.5"), sgpu(1, 0, 100, 100)),
    (sgpu_container(count=1, cores="33.3"), sgpu(1, 0, 100, 100)),
    (sgpu_container(count=1, mem="9Ei"), sgpu(1, 0, 100, 100)),                       # not an int64
])
def test_requests(ctr: dict, expected: DeviceRequest) -> None:
    assert make_engine().requests(make_pod(ctr)).containers[0] == {"Metax-SGPU": expected}


@pytest.mark.parametrize("ctr", [
    sgpu_container(count=1, mem=2100001),               # overflow (Go test)
    sgpu_container(count=1, mem=2097152),               # just above MaxInt32 / 1024
    sgpu_container(count="2200000000"),                 # count beyond int32 (Go test)
    sgpu_container(count=1, cores="2200000000"),        # vcore beyond int32 (Go test)
    sgpu_container(count=1, cores=-1),
    sgpu_container(count=1, mem=-1),
    sgpu_container(count=1, mem="-2Mi"),
    sgpu_container(count=1, mem="4Ei"),                 # 2^62 bytes is beyond int32 MiB
    sgpu_container(count=0),
    sgpu_container(count=-1),
    sgpu_container(count="1.5"),
    sgpu_container(count="one"),
    container(requests={SGPU: "1"}),                    # only limits are read
    container(),
])
def test_dropped_requests(ctr: dict) -> None:
    assert make_engine().requests(make_pod(ctr)).containers[0] == {}


def test_requests_memory_is_read_from_limits_only() -> None:
    ctr = container(limits={SGPU: "1"}, requests={VMEMORY: "4", VCORE: "10"})
    assert make_engine().requests(make_pod(ctr)).containers[0] == {"Metax-SGPU": sgpu(1, 0, 100, 100)}


def test_every_container_in_order() -> None:
    pod = make_pod(sgpu_container("a", mem=2), container("cpu"), init=[sgpu_container("i", cores=10)])
    reqs = make_engine().requests(pod)
    assert reqs.init_count == 1
    assert reqs.containers == ({"Metax-SGPU": sgpu(1, 0, 100, 10)}, {"Metax-SGPU": sgpu(1, 2048, 0, 100)}, {})
