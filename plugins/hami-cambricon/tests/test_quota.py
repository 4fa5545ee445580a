"""Quota-aware fit (vendors D.4, D.7; scheduler §11.2), through ``hami_filter_nodes``' ``quota`` argument.

These tests hand the quota state to the backend's ``hami_filter_nodes`` directly, as the engine's view of the
pod's namespace (``cambricon_testlib.quota_view``); tests/engine/test_quota.py drives it through the engine.
"""

from __future__ import annotations

from cambricon_testlib import VCORE, VMEMORY, chosen, fit, make_pod, mlu_container, request, usage

from hami_core.plugins import ContainerDevice, QuotaEntry

NS = "cambricon-quota-test-ns"


def test_hami_vector_whole_card_request_is_charged_its_memory() -> None:
    # TestDevices_Fit_ResourceQuotaWholeCardRequest: limits.cambricon.com/mlu.smlu.vmemory 50 (= 12800 MiB)
    # against a request without memory (100 % of a 40960 MiB card).
    quotas = {(NS, VMEMORY): QuotaEntry(limit=50)}
    result = fit([usage("dev-0", totalmem=40960)], request(memreq=0, pct=100, coresreq=10),
                 pod=make_pod(namespace=NS), quotas=quotas)
    assert result.reason == "1/1 ResourceQuotaNotFit"


def test_memory_limit_is_in_256_mib_units() -> None:
    pod = make_pod(namespace=NS)
    assert chosen(fit([usage("dev-0", totalmem=40960)], request(memreq=12800), pod=pod,
                      quotas={(NS, VMEMORY): QuotaEntry(limit=50)})) == ["dev-0"]
    assert fit([usage("dev-0", totalmem=40960)], request(memreq=12800), pod=pod,
               quotas={(NS, VMEMORY): QuotaEntry(limit=50, used=1)}).reason == "1/1 ResourceQuotaNotFit"


def test_core_limit() -> None:
    pod = make_pod(namespace=NS)
    quotas = {(NS, VCORE): QuotaEntry(limit=30, used=20)}
    assert chosen(fit([usage("dev-0")], request(memreq=64, coresreq=10), pod=pod, quotas=quotas)) == ["dev-0"]
    assert fit([usage("dev-0")], request(memreq=64, coresreq=11), pod=pod,
               quotas=quotas).reason == "1/1 ResourceQuotaNotFit"


def test_limit_zero_blocks_everything() -> None:
    result = fit([usage("dev-0")], request(memreq=256), pod=make_pod(namespace=NS),
                 quotas={(NS, VMEMORY): QuotaEntry(limit=0)})
    assert result.reason == "1/1 ResourceQuotaNotFit"


def test_other_namespaces_are_not_limited() -> None:
    result = fit([usage("dev-0")], request(memreq=64), pod=make_pod(namespace="elsewhere"),
                 quotas={(NS, VMEMORY): QuotaEntry(limit=0)})
    assert chosen(result) == ["dev-0"]


def test_quota_is_checked_before_capacity() -> None:
    # Step 10 of the standard checklist comes before the memory check (vendors A.7).
    result = fit([usage("dev-0", totalmem=128)], request(memreq=512), pod=make_pod(namespace=NS),
                 quotas={(NS, VMEMORY): QuotaEntry(limit=1)})
    assert result.reason == "1/1 ResourceQuotaNotFit"


def test_devices_of_earlier_app_containers_count() -> None:
    pod = make_pod(mlu_container("a", mem=32), mlu_container("b", mem=20), namespace=NS)
    earlier = {"MLU": [(ContainerDevice("dev-0", "MLU", 8192, 100, 0),), ()]}
    quotas = {(NS, VMEMORY): QuotaEntry(limit=50)}
    result = fit([usage("dev-0", totalmem=40960)], request(memreq=5120, coresreq=100), pod=pod, allocated=earlier,
                 quotas=quotas)
    assert result.reason == "1/1 ResourceQuotaNotFit"  # 8192 + 5120 > 12800


def test_init_containers_count_as_their_peak() -> None:
    pod = make_pod(mlu_container("app", mem=20), init=[mlu_container("init", mem=32)], namespace=NS)
    earlier = {"MLU": [(ContainerDevice("dev-0", "MLU", 8192, 100, 0),), ()]}
    quotas = {(NS, VMEMORY): QuotaEntry(limit=50)}
    result = fit([usage("dev-0", totalmem=40960)], request(memreq=5120, coresreq=100), pod=pod, allocated=earlier,
                 quotas=quotas)
    assert chosen(result) == ["dev-0"]  # max(8192, 5120) <= 12800


def test_devices_chosen_earlier_in_the_same_container_count() -> None:
    devices = [usage("dev-0", index=0, totalmem=40960), usage("dev-1", index=1, totalmem=40960)]
    quotas = {(NS, VMEMORY): QuotaEntry(limit=50)}
    result = fit(devices, request(nums=2, memreq=7680), pod=make_pod(namespace=NS), quotas=quotas)
    # dev-1 fits (7680), dev-0 would make 15360 > 12800.
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"
