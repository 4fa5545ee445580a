"""Pod annotations written for a decision (vendors D.5, A.4) and read back after a restart."""

from __future__ import annotations

from typing import Any

from cambricon_testlib import ALLOCATED, ASSIGNED, PROFILE, T0, TO_ALLOCATE, make_engine, make_pod, mlu_container

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice, PodSingleDevice


def annotations(engine: Engine, devices: PodSingleDevice, name: str = "MLU") -> dict[str, Any]:
    """Every plugin's ``hami_allocation_annotations`` merged as the engine merges them."""
    out: dict[str, Any] = {}
    results = engine.hook.hami_allocation_annotations(backend=engine.backends[name], pod=make_pod(), devices=devices,
                                                      node="n1", now=T0)
    for part in reversed(results):
        out.update(part or {})
    return out


DEVICE_0 = ContainerDevice("device-0", "MLU", 256000, 1, idx=0)


def test_hami_vector_one_container() -> None:
    assert annotations(make_engine(), ((DEVICE_0,),)) == {
        ASSIGNED: "false",
        PROFILE: "0_1_1000",
        TO_ALLOCATE: "device-0,MLU,256000,1:;",
        ALLOCATED: "device-0,MLU,256000,1:;",
    }


def test_hami_vector_leading_container_without_mlu() -> None:
    assert annotations(make_engine(), ((), (DEVICE_0,))) == {
        ASSIGNED: "false",
        PROFILE: "0_1_1000",
        TO_ALLOCATE: ";device-0,MLU,256000,1:;",
        ALLOCATED: ";device-0,MLU,256000,1:;",
    }


def test_profile_describes_the_first_device_of_the_first_container() -> None:
    devices = ((), (ContainerDevice("n-cambricon-mlu-2", "MLU", 5120, 30, idx=2),
                    ContainerDevice("n-cambricon-mlu-3", "MLU", 5120, 30, idx=3)),
               (ContainerDevice("n-cambricon-mlu-0", "MLU", 1000, 5, idx=0),))
    out = annotations(make_engine(), devices)
    assert out[PROFILE] == "2_30_20"
    assert out[ALLOCATED] == (";n-cambricon-mlu-2,MLU,5120,30:n-cambricon-mlu-3,MLU,5120,30:;"
                              "n-cambricon-mlu-0,MLU,1000,5:;")


def test_profile_memory_is_truncated_to_whole_units() -> None:
    out = annotations(make_engine(), ((ContainerDevice("d", "MLU", 49151, 100, idx=1),),))
    assert out[PROFILE] == "1_100_191"


def test_legacy_misspelled_key_only_on_request() -> None:
    out = annotations(make_engine({"legacyAssignedAnnotation": True}), ((DEVICE_0,),))
    assert out[ASSIGNED] == out["CAMBRICON_DSMLU_ASSIGHED"] == "false"
    assert "CAMBRICON_DSMLU_ASSIGHED" not in annotations(make_engine(), ((DEVICE_0,),))


def test_no_device_no_dsmlu_annotations() -> None:
    engine = make_engine()
    results = engine.hook.hami_allocation_annotations(backend=engine.backends["MLU"], pod=make_pod(), devices=((),),
                                                      node="n1", now=T0)
    merged: dict[str, str] = {}
    for part in results:
        merged.update(part or {})
    assert PROFILE not in merged
    assert ASSIGNED not in merged


def test_allocated_annotation_is_decoded_back() -> None:
    engine = make_engine()
    pod = make_pod(mlu_container(), annotations={ALLOCATED: ";device-0,MLU,256000,1:;"})
    assert engine.hook.hami_decode_allocation(backend=engine.backends["MLU"], pod=pod) == (
        (), (ContainerDevice("device-0", "MLU", 256000, 1),), ())
