"""The example third-party plugin (examples/hami-example-vendor, hami-acme) under ``make test``.

``make test`` collects only ``tests`` and ``plugins``; the example is on ``sys.path`` (pytest's ``pythonpath`` in
pyproject.toml), and this module imports its plugin module explicitly (no install, no subprocess) and re-exports its
tests. It then breaks the example on purpose and checks that the conformance suite names the broken contract.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import hami_acme.plugin
from hami_acme import backend as acme
from hami_core import hookimpl
from hami_core.plugins import parse_section
from hami_core.plugins.fit import standard_fit
from hami_core.plugins.standard import standard_dra_devices
from hami_core.plugins.types import ContainerDevice, DeviceRequest, FitCandidate, FitResult, Mutation
from hami_core.testing import DeviceBackendConformance
from hami_core.testing.conformance import ConformanceKit

REGISTER = "hami.io/node-acme-register"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hami-example-vendor"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"hami_acme_example_tests.{name}", EXAMPLE / "tests" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_conformance = _load("test_conformance")
_backend_tests = _load("test_backend")

# The example's own tests, collected here.
TestAcmeConformance = _conformance.TestAcmeConformance
for _name in dir(_backend_tests):
    if _name.startswith("test_") or _name == "engine":
        globals()[_name] = getattr(_backend_tests, _name)


def test_example_declares_the_entry_point() -> None:
    text = (EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")
    assert '[project.entry-points."hami.devices"]\nacme = "hami_acme.plugin"' in text


# ------------------------------------------------------------------------------------------ broken plugins
def _declaring(backend_class: type[acme.AcmeBackend]) -> type:
    """A plugin like hami_acme.plugin that declares ``backend_class`` (a broken AcmeBackend) instead."""

    class Plugin:
        __name__ = "hami_acme_broken"

        @hookimpl
        def hami_device_backends(self, config: Any) -> list[acme.AcmeBackend]:
            if acme.VENDOR not in config:
                return []
            return [backend_class.from_config(parse_section(acme.VENDOR, acme.AcmeConfig, config[acme.VENDOR]))]

    return Plugin


class _FreeTextReasons(acme.AcmeBackend):
    def hami_filter_nodes(self, pod: Any, request: DeviceRequest, candidates: Sequence[FitCandidate], policy: Any,
                          quota: Any) -> Sequence[FitResult]:
        results = super().hami_filter_nodes(pod, request, candidates, policy, quota)
        return [r if r.ok else FitResult.unschedulable("no room on this node") for r in results]


class _OverAllocates(acme.AcmeBackend):
    def hami_filter_nodes(self, request: DeviceRequest, candidates: Sequence[FitCandidate]) -> list[FitResult]:
        # Ignores usage: always the preferred card.
        return [FitResult.success([ContainerDevice(c.devices[-1].id, acme.COMMON_WORD, request.memreq,
                                                   request.coresreq, c.devices[-1].index)]) for c in candidates]


class _FirstDeviceOnly(acme.AcmeBackend):
    def hami_filter_nodes(self, request: DeviceRequest, candidates: Sequence[FitCandidate]) -> list[FitResult]:
        out = []
        for cand in candidates:
            # Position-dependent: only the card the node registered first is ever used.
            first = cand.node.devices[acme.COMMON_WORD][0].id
            out.append(standard_fit([d for d in cand.devices if d.id == first], request))
        return out


class _DefaultRequest(acme.AcmeBackend):
    def hami_container_request(self, container: Any) -> DeviceRequest | None:
        return super().hami_container_request(container) or DeviceRequest(acme.COMMON_WORD, 1, 0, 100, 0)


class _CrashesOnPlainNodes(acme.AcmeBackend):
    def hami_node_devices(self, node: Any) -> Any:
        raw = node["metadata"]["annotations"][self.register_annotation]
        return super().hami_node_devices(node) if raw else []


class _SwallowsBadRegistration(acme.AcmeBackend):
    def hami_node_devices(self, node: Any) -> Any:
        try:
            return super().hami_node_devices(node)
        except ValueError:
            return []


class _ForgetsAllocation(acme.AcmeBackend):
    def hami_decode_allocation(self) -> Any:
        return ()


class _AppendsEnv(acme.AcmeBackend):
    def hami_mutate_container(self, pod: Any, container: dict[str, Any]) -> Mutation:
        container.setdefault("env", []).append({"name": "ACME_VISIBLE", "value": "all"})
        return super().hami_mutate_container(pod, container)


class _OverstatesMemory(acme.AcmeBackend):
    def hami_dra_devices(self, devices: Sequence[Any]) -> Any:
        # Publishes twice the registered memory: DRA would place claims the card cannot hold.
        out = []
        for dev in standard_dra_devices(self, devices):
            memory = dev.capacity["memory"]
            out.append(replace(dev, capacity={**dev.capacity, "memory": replace(memory, value=2 * memory.value)}))
        return out


class NegativeScore(_declaring(acme.AcmeBackend)):  # type: ignore[misc]
    """A cross-cutting scorer next to a correct backend."""

    @hookimpl
    def hami_prescore_nodes(self, batch: Any) -> list[float]:
        # "higher is better" inverted, and large enough to beat the default score.
        return [-1000.0 * float(row[0]) for row in batch.totals]


FreeTextReasons = _declaring(_FreeTextReasons)
OverAllocates = _declaring(_OverAllocates)
FirstDeviceOnly = _declaring(_FirstDeviceOnly)
DefaultRequest = _declaring(_DefaultRequest)
CrashesOnPlainNodes = _declaring(_CrashesOnPlainNodes)
SwallowsBadRegistration = _declaring(_SwallowsBadRegistration)
ForgetsAllocation = _declaring(_ForgetsAllocation)
AppendsEnv = _declaring(_AppendsEnv)
OverstatesMemory = _declaring(_OverstatesMemory)


BROKEN = [
    pytest.param(FreeTextReasons, "test_reasons_parse_into_hami_words", "do not parse", id="free-text-reasons"),
    pytest.param(OverAllocates, "test_fit_never_exceeds_capacity", None, id="over-allocation"),
    pytest.param(FirstDeviceOnly, "test_feasibility_does_not_depend_on_device_order", None, id="order-dependent"),
    pytest.param(DefaultRequest, "test_empty_container_requests_nothing", None, id="default-request"),
    pytest.param(CrashesOnPlainNodes, "test_node_without_registration_has_no_devices", None, id="crash-on-plain-node"),
    pytest.param(SwallowsBadRegistration, "test_malformed_registration_is_a_clear_error", "WireFormatError",
                 id="swallowed-wire-error"),
    pytest.param(ForgetsAllocation, "test_allocation_round_trips_through_decoder", None, id="lost-allocation"),
    pytest.param(NegativeScore, "test_scores_respect_policy_direction", "chose", id="inverted-score"),
    pytest.param(AppendsEnv, "test_admission_is_idempotent", None, id="non-idempotent-admission"),
    pytest.param(OverstatesMemory, "test_dra_devices_describe_the_registration", "more memory than registered",
                 id="dra-overstated-memory"),
]


@pytest.fixture
def acme_kit() -> ConformanceKit:
    suite = _conformance.TestAcmeConformance()
    node = suite.device_node.__wrapped__(suite)
    # Two different cards, so that a fit that depends on their order places a different number of pods.
    cards = json.loads(node["metadata"]["annotations"][REGISTER])
    cards[1].update(count=2, devmem=8192)
    node["metadata"]["annotations"][REGISTER] = json.dumps(cards)
    pod = suite.fitting_pod.__wrapped__(suite)
    return ConformanceKit(hami_acme.plugin, {"acme": {}}, node, pod, _malformed(node))


def _malformed(node: dict[str, Any]) -> tuple[dict[str, Any], str]:
    bad = copy.deepcopy(node)
    bad["metadata"]["annotations"][REGISTER] = "{not a registration"
    return bad, REGISTER


@pytest.mark.parametrize(("plugin", "check", "message"), BROKEN)
def test_broken_plugin_fails_the_named_check(acme_kit: ConformanceKit, plugin: type, check: str,
                                             message: str | None) -> None:
    suite = DeviceBackendConformance()
    getattr(suite, check)(acme_kit)  # the real example passes
    broken = ConformanceKit(plugin(), acme_kit.device_config, acme_kit.device_node, acme_kit.fitting_pod,
                            acme_kit.malformed_node)
    with pytest.raises(Exception, match=message) as info:
        getattr(suite, check)(broken)
    assert not isinstance(info.value, pytest.skip.Exception)


def test_every_check_has_a_broken_example() -> None:
    checks = {name for name in dir(DeviceBackendConformance) if name.startswith("test_")}
    covered = {p.values[1] for p in BROKEN}
    assert checks - covered == {"test_fixtures_are_usable"}
    for name in checks:
        doc = getattr(DeviceBackendConformance, name).__doc__ or ""
        assert "Prevents:" in doc, f"{name} does not name the bug it prevents"


@pytest.mark.parametrize("path", ["pyproject.toml", "hami_acme/__init__.py", "hami_acme/backend.py",
                                  "hami_acme/plugin.py", "tests/test_conformance.py", "tests/test_backend.py"])
def test_tutorial_shows_the_example_files_verbatim(path: str) -> None:
    tutorial = (EXAMPLE.parents[1] / "docs" / "plugin-authoring.md").read_text(encoding="utf-8")
    assert (EXAMPLE / path).read_text(encoding="utf-8").rstrip("\n") in tutorial, f"{path} drifted from the tutorial"


def test_tutorial_lists_every_check() -> None:
    tutorial = (EXAMPLE.parents[1] / "docs" / "plugin-authoring.md").read_text(encoding="utf-8")
    for name in dir(DeviceBackendConformance):
        if name.startswith("test_"):
            assert f"`{name}`" in tutorial
