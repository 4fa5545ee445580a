"""One test per branch of the entry-point loader (STYLE rule 5), driven by fake distributions."""

from __future__ import annotations

import logging
import sys

import importlib_metadata
import pytest
import stevedore

import hami_core.default_plugins
from hami_core import hookimpl
from hami_core.plugins.errors import PluginError
from hami_core.plugins.manager import (
    ENTRY_POINT_GROUP,
    TRACE_ENV_VAR,
    HamiPluginManager,
    PluginReport,
    get_plugin_manager,
)
from hami_core.plugins.types import DeviceBackend, ResourceNames

GOOD = "hami-test-plugins"
AUTHOR = "report this to the plugin author"


def _warnings_about(caplog: pytest.LogCaptureFixture, entry_point: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.levelno >= logging.WARNING and f"'{entry_point}'" in r.getMessage()]


# ------------------------------------------------------------------------------------------------
# Environment problems: skipped and reported, the other plugins load
# ------------------------------------------------------------------------------------------------


def test_success_entry_point_is_registered_with_its_distribution(load, report_of) -> None:
    pm = load("good")

    assert report_of(pm, "success") == PluginReport("success", GOOD, "1.0", "loaded")
    assert pm.distribution_of("success") == GOOD
    assert pm.describe("success") == "'success' (hami-test-plugins 1.0)"
    backend = DeviceBackend(name="TESTGPU", vendor="testgpu",
                            resource_names=ResourceNames("example.com/testgpu"))
    assert pm.hook.hami_node_devices(backend=backend, node={}) == []


def test_plain_import_error_is_skipped_with_a_warning(load, report_of, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="hami.plugins")
    pm = load("good")

    report = report_of(pm, "importerror")
    assert (report.status, report.distribution, report.version) == ("failed", GOOD, "1.0")
    assert report.reason == "ImportError: cannot import name 'gone' from 'hami_test_plugins'"
    [warning] = _warnings_about(caplog, "importerror")
    assert warning.levelno == logging.WARNING
    assert "hami-test-plugins 1.0" in warning.getMessage()
    assert not pm.has_plugin("importerror")
    assert pm.has_plugin("success")


def test_missing_vendor_sdk_is_skipped_at_debug_level(load, report_of, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="hami.plugins")
    pm = load("good")

    report = report_of(pm, "sdkmissing")
    assert (report.status, report.distribution, report.version) == ("failed", GOOD, "1.0")
    assert report.reason.startswith("ModuleNotFoundError: ")
    assert "acme_vendor_sdk_not_installed" in report.reason
    assert _warnings_about(caplog, "sdkmissing") == []
    debug = [r for r in caplog.records if "'sdkmissing'" in r.getMessage()]
    assert [r.levelno for r in debug] == [logging.DEBUG]
    assert "acme_vendor_sdk_not_installed" in debug[0].getMessage()


def test_missing_module_of_the_plugins_own_package_warns(load, report_of, caplog) -> None:
    """A wrong entry point string is a packaging bug, not a missing SDK: it must not hide at DEBUG."""
    caplog.set_level(logging.DEBUG, logger="hami.plugins")
    pm = load("good")

    report = report_of(pm, "wrongpath")
    assert report.status == "failed"
    assert report.reason.startswith("ModuleNotFoundError: ")
    [warning] = _warnings_about(caplog, "wrongpath")
    assert "hami-test-plugins 1.0" in warning.getMessage()


def test_other_exception_at_import_is_skipped_with_a_warning(load, report_of, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="hami.plugins")
    pm = load("good")

    report = report_of(pm, "crash")
    assert report == PluginReport("crash", GOOD, "1.0", "failed",
                                  "RuntimeError: driver probe exploded at import time")
    [warning] = _warnings_about(caplog, "crash")
    assert "hami-test-plugins 1.0" in warning.getMessage()


def test_blocked_entry_point_is_never_imported(load, report_of) -> None:
    pm = load("good", blocked=("blocked",))

    expected = PluginReport("blocked", GOOD, "1.0", "blocked", "blocked by configuration")
    assert report_of(pm, "blocked") == expected
    assert "hami_test_plugins.blocked" not in sys.modules
    assert pm.is_blocked("blocked")
    assert not pm.has_plugin("blocked")


def test_entry_point_loads_when_not_blocked(load, report_of) -> None:
    pm = load("good")

    assert report_of(pm, "blocked").status == "loaded"
    assert pm.has_plugin("blocked")


def test_load_entrypoints_false_ignores_installed_plugins(add_dists) -> None:
    add_dists("good")

    pm = get_plugin_manager(load_entrypoints=False)

    assert all(r.status == "builtin" for r in pm.reports)
    assert not pm.has_plugin("success")


# ------------------------------------------------------------------------------------------------
# Contract problems: PluginError naming the entry point and its distribution
# ------------------------------------------------------------------------------------------------


def test_bad_hook_signature_raises_naming_the_plugin(load) -> None:
    with pytest.raises(PluginError) as info:
        load("good", "badsignature")

    message = str(info.value)
    assert "'badsignature' (hami-test-badsignature 1.0)" in message
    assert "gpu_driver_handle" in message
    assert AUTHOR in message
    assert GOOD not in message


def test_unknown_hook_is_attributed_to_the_right_plugin(load) -> None:
    with pytest.raises(PluginError) as info:
        load("good", "unknownhook")

    message = str(info.value)
    assert "'unknownhook' (hami-test-unknownhook 1.0)" in message
    assert "hami_filtr_node" in message
    assert AUTHOR in message
    assert GOOD not in message


def test_duplicate_entry_point_name_loads_neither_and_names_both_distributions(load) -> None:
    # An installation problem, not a plugin author's: the manager is built, both are reported as a conflict, and
    # what every component needs (backends) refuses with one message naming both and the fix.
    pm = load("good", "duplicate")

    reports = {r.distribution: r for r in pm.reports if r.name == "success"}
    assert {d: r.status for d, r in reports.items()} == {GOOD: "conflict", "hami-test-duplicate": "conflict"}
    assert "hami-test-duplicate 1.0" in reports[GOOD].reason
    assert "hami-test-plugins 1.0" in reports["hami-test-duplicate"].reason
    assert not pm.has_plugin("success")
    with pytest.raises(PluginError) as info:
        pm.backends({})
    message = str(info.value)
    assert "entry point 'success'" in message
    assert "hami-test-plugins 1.0" in message and "hami-test-duplicate 1.0" in message
    assert "HAMI_BLOCK_PLUGINS=" in message and AUTHOR not in message


def test_blocking_one_distribution_resolves_a_name_conflict(load, report_of) -> None:
    pm = load("good", "duplicate", blocked=("hami_test_duplicate",))  # distribution names compare as pip's

    assert {(r.distribution, r.status) for r in pm.reports if r.name == "success"} == {
        (GOOD, "loaded"), ("hami-test-duplicate", "blocked")}
    assert pm.has_plugin("success") and pm.distribution_of("success") == GOOD
    assert not pm.conflicts
    pm.backends({})


def test_environment_variable_blocks_by_entry_point_name(load, report_of, monkeypatch) -> None:
    monkeypatch.setenv("HAMI_BLOCK_PLUGINS", " crash, wrongpath ")
    pm = load("good")

    assert report_of(pm, "crash").status == "blocked"
    assert report_of(pm, "wrongpath").status == "blocked"
    assert "hami_test_plugins.crash" not in sys.modules  # blocked means not even imported
    assert report_of(pm, "success").status == "loaded"


def test_backends_by_plugin_isolates_a_broken_registration_hook(load) -> None:
    class Broken:
        __name__ = "broken"

        @hookimpl
        def hami_device_backends(self, config):
            raise RuntimeError("no such card")

    pm = load("good", plugins=[Broken()])
    result = pm.backends_by_plugin({})
    assert isinstance(result["broken"], PluginError)
    assert "hami_device_backends failed: RuntimeError: no such card" in str(result["broken"])
    assert result["success"] == ["TESTGPU"]


def test_duplicate_backend_name_across_distributions(load) -> None:
    pm = load("good", "clash")

    with pytest.raises(PluginError) as info:
        pm.backends({})

    message = str(info.value)
    assert "'TESTGPU'" in message
    assert "'success' (hami-test-plugins 1.0)" in message
    assert "'clash' (hami-test-clash 1.0)" in message
    assert AUTHOR in message


def test_explicit_plugin_with_unknown_hook_is_named() -> None:
    class Misspelled:
        __name__ = "misspelled-policy"

        @hookimpl
        def hami_scor_nodes(self, pod, candidates, policy):
            return None

    with pytest.raises(PluginError, match=r"'misspelled-policy'.*hami_scor_nodes"):
        get_plugin_manager(load_entrypoints=False, plugins=[Misspelled()])


def test_explicit_plugin_clashing_with_an_entry_point_name(load) -> None:
    class Impostor:
        __name__ = "success"

    with pytest.raises(PluginError, match=r"'success' \(hami-test-plugins 1.0\)"):
        load("good", plugins=[Impostor()])


# ------------------------------------------------------------------------------------------------
# Built-ins, explicit plugins, independence, tracing, caches
# ------------------------------------------------------------------------------------------------


def test_builtin_plugins_are_registered_first_with_status_builtin(monkeypatch, add_dists, report_of) -> None:
    add_dists("good")
    monkeypatch.setattr(hami_core.default_plugins, "DEFAULT_PLUGINS", ("hami_test_plugins.success",),
                        raising=False)

    pm = get_plugin_manager(load_entrypoints=False)

    report = report_of(pm, "hami.default.success")
    assert report == PluginReport("hami.default.success", "hami-core", hami_core.__version__, "builtin")
    assert pm.reports[0] == report
    assert pm.distribution_of("hami.default.success") == "hami-core"


def test_explicit_plugins_are_registered_by_name_and_reported() -> None:
    class Policy:
        __name__ = "quota-policy"

        @hookimpl
        def hami_pod_bound(self, pod, node):
            return None

    policy = Policy()

    pm = get_plugin_manager(load_entrypoints=False, plugins=[policy])

    assert pm.get_plugin("quota-policy") is policy
    assert pm.reports[-1] == PluginReport("quota-policy", None, None, "loaded")
    assert pm.distribution_of("quota-policy") is None


def test_two_managers_in_one_process_are_independent(load) -> None:
    class Extra:
        __name__ = "extra"

    first = load("good", plugins=[Extra()])
    second = load("good", blocked=("success",))

    assert first.has_plugin("success") and first.has_plugin("extra")
    assert not second.has_plugin("success") and not second.has_plugin("extra")
    assert second.is_blocked("success") and not first.is_blocked("success")
    assert first.hook is not second.hook
    assert first.reports is not second.reports


def test_trace_env_var_logs_hook_calls(monkeypatch, caplog) -> None:
    class Bound:
        __name__ = "bound"

        @hookimpl
        def hami_pod_bound(self, pod, node):
            return None

    monkeypatch.setenv(TRACE_ENV_VAR, "1")
    caplog.set_level(logging.DEBUG, logger="hami.plugins")
    pm = get_plugin_manager(load_entrypoints=False, plugins=[Bound()])

    pm.hook.hami_pod_bound(pod={}, node="node-a")

    traced = [r.getMessage() for r in caplog.records if r.name == "hami.plugins"]
    assert any("hami_pod_bound" in m and "node-a" in m for m in traced), traced


def test_tracing_is_off_by_default(monkeypatch, caplog) -> None:
    monkeypatch.delenv(TRACE_ENV_VAR, raising=False)
    caplog.set_level(logging.DEBUG, logger="hami.plugins")
    pm = get_plugin_manager(load_entrypoints=False)

    pm.hook.hami_pod_bound(pod={}, node="node-a")

    assert not [r for r in caplog.records if "hami_pod_bound" in r.getMessage()]


def test_stevedore_entry_point_caches_are_not_trusted(load, report_of) -> None:
    """stevedore caches a group's entry points for the whole process and drops their distribution.

    Plugins installed (here: put on sys.path) after that cache was filled must still be found.
    """
    ghost = importlib_metadata.EntryPoint("ghost", "no_such_package.plugin", ENTRY_POINT_GROUP)
    stevedore.ExtensionManager.ENTRY_POINT_CACHE[ENTRY_POINT_GROUP] = [ghost]

    pm = load("good")

    assert report_of(pm, "success").distribution == GOOD
    assert "ghost" not in {r.name for r in pm.reports}


def test_manager_constructor_alone_registers_nothing() -> None:
    pm = HamiPluginManager()

    assert pm.get_plugins() == set()
    assert pm.reports == []
