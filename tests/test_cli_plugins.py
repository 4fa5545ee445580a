"""The ``hami`` command line: ``plugins``, ``version``, ``simulate`` delegation, dispatch to the components and error
reporting."""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import importlib_metadata
import pytest

import hami_core
from hami_core import cli, hookimpl, pluginreport
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager

DATA = Path(__file__).parent / "plugins" / "data"


@pytest.fixture(autouse=True)
def _forget_fake_plugins() -> Iterator[None]:
    yield
    for module in [m for m in sys.modules if m.startswith("hami_test_")]:
        del sys.modules[module]


@pytest.fixture
def fake_dists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the fake ``hami-test-plugins`` distribution is visible to ``hami plugins``.

    Vendor plugins really installed in the environment are blocked so the output is deterministic.
    """
    installed = tuple(ep.name for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))
    monkeypatch.syspath_prepend(str(DATA / "good"))
    monkeypatch.setattr(pluginreport, "get_plugin_manager", functools.partial(get_plugin_manager, blocked=installed))


def _rows_by_name(output: str) -> dict[str, dict[str, object]]:
    return {row["name"]: row for row in json.loads(output)["plugins"]}


def test_plugins_json_lists_loaded_and_failed_plugins(fake_dists, capsys) -> None:
    assert cli.main(["plugins", "--json"]) == 0

    out = capsys.readouterr().out
    rows = _rows_by_name(out)
    assert rows["success"] == {"name": "success", "distribution": "hami-test-plugins", "version": "1.0",
                               "status": "loaded", "reason": "", "backends": ["TESTGPU"]}
    failed = rows["importerror"]
    assert (failed["status"], failed["distribution"]) == ("failed", "hami-test-plugins")
    assert failed["reason"] == "ImportError: cannot import name 'gone' from 'hami_test_plugins'"
    assert failed["backends"] == []
    assert json.loads(out)["backends_error"] is None


def test_plugins_table(fake_dists, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")

    assert cli.main(["plugins"]) == 0

    out = capsys.readouterr().out
    success_line = next(line for line in out.splitlines() if " success " in line)
    assert "hami-test-plugins" in success_line and "loaded" in success_line and "TESTGPU" in success_line
    importerror_line = next(line for line in out.splitlines() if " importerror " in line)
    assert "failed" in importerror_line and "ImportError" in importerror_line


def test_a_plugin_whose_registration_hook_raises_is_broken_and_the_others_still_list(monkeypatch, capsys) -> None:
    class NeedsConfig:
        __name__ = "needs-config"

        @hookimpl
        def hami_device_backends(self, config):
            raise ConfigError("acme: section is required")

    monkeypatch.setattr(pluginreport, "get_plugin_manager",
                        lambda blocked=(): get_plugin_manager(load_entrypoints=False, plugins=[NeedsConfig()]))

    assert cli.main(["plugins", "--json"]) == 0

    document = json.loads(capsys.readouterr().out)
    assert document["backends_error"] == "acme: section is required"
    rows = {row["name"]: row for row in document["plugins"]}
    assert (rows["needs-config"]["status"], rows["needs-config"]["reason"]) == ("broken", "acme: section is required")
    assert rows["needs-config"]["backends"] is None
    assert rows["hami.default.policies"]["status"] == "builtin"

    assert cli.main(["plugins", "check"]) == 1
    assert "problem: acme: section is required" in capsys.readouterr().out


def _installed() -> tuple[str, ...]:
    return tuple(ep.name for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))


def test_two_distributions_with_one_entry_point_name_are_listed_not_fatal(monkeypatch, capsys) -> None:
    installed = _installed()
    monkeypatch.syspath_prepend(str(DATA / "good"))
    monkeypatch.syspath_prepend(str(DATA / "duplicate"))
    monkeypatch.setattr(pluginreport, "get_plugin_manager",
                        lambda blocked=(): get_plugin_manager(blocked=(*installed, "crash", *blocked)))

    assert cli.main(["plugins", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    conflicts = sorted(r["distribution"] for r in document["plugins"] if r["status"] == "conflict")
    assert conflicts == ["hami-test-duplicate", "hami-test-plugins"]
    assert "hami-test-duplicate 1.0" in document["backends_error"]
    assert "hami-test-plugins 1.0" in document["backends_error"]

    assert cli.main(["plugins", "check"]) == 1
    out = capsys.readouterr().out
    assert "problem: two installed distributions declare the hami.devices entry point 'success'" in out
    assert cli.main(["version"]) == 0


def test_config_blocks_a_plugin_by_distribution_name(monkeypatch, capsys, tmp_path) -> None:
    installed = _installed()
    monkeypatch.syspath_prepend(str(DATA / "good"))
    monkeypatch.syspath_prepend(str(DATA / "duplicate"))
    monkeypatch.setattr(pluginreport, "get_plugin_manager",
                        lambda blocked=(): get_plugin_manager(blocked=(*installed, "crash", *blocked)))
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia: {}\nplugins:\n  blocked: [hami-test-duplicate]\n")

    assert cli.main(["plugins", "--json", "--config", str(config)]) == 0
    rows = [(r["name"], r["distribution"], r["status"]) for r in json.loads(capsys.readouterr().out)["plugins"]
            if r["name"] == "success"]
    assert sorted(rows) == [("success", "hami-test-duplicate", "blocked"), ("success", "hami-test-plugins", "loaded")]


def test_check_runs_the_registration_hook_of_a_vendor_the_config_does_not_name(monkeypatch, capsys, tmp_path) -> None:
    # --config names only nvidia; the broken hook belongs to a vendor whose section is in the defaults (ascend).
    class BrokenAscend:
        __name__ = "broken-ascend"

        @hookimpl
        def hami_device_backends(self, config):
            if "vnpus" in config:  # Ascend's section, as HAMi names it
                raise RuntimeError("ascend section unreadable")
            return []

    monkeypatch.setattr(pluginreport, "get_plugin_manager",
                        lambda blocked=(): get_plugin_manager(load_entrypoints=False, plugins=[BrokenAscend()]))
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia: {}\n")

    assert cli.main(["plugins", "check", "--config", str(config)]) == 1
    assert "ascend section unreadable" in capsys.readouterr().out
    # The listing shows what --config alone registers: the plugin is not broken under it.
    assert cli.main(["plugins", "--json", "--config", str(config)]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["plugins"]}
    assert rows["broken-ascend"]["status"] == "loaded"


def test_plugin_error_is_one_clean_line(monkeypatch, capsys) -> None:
    installed = tuple(ep.name for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))
    monkeypatch.syspath_prepend(str(DATA / "badsignature"))
    monkeypatch.setattr(pluginreport, "get_plugin_manager", functools.partial(get_plugin_manager, blocked=installed))

    assert cli.main(["plugins"]) == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("hami: error: entry point 'badsignature' (hami-test-badsignature 1.0)")
    assert line.endswith("report this to the plugin author")


def test_no_command_prints_help_and_returns_2(capsys) -> None:
    assert cli.main([]) == 2

    assert "usage: hami" in capsys.readouterr().err


def test_unknown_argument_is_a_usage_error(capsys) -> None:
    assert cli.main(["plugins", "--bogus"]) == 2

    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_version(capsys) -> None:
    assert cli.main(["version", "--log-level", "debug"]) == 0

    assert capsys.readouterr().out == f"hami-core {hami_core.__version__}\n"


def test_simulate_delegates_to_the_simulator(monkeypatch) -> None:
    seen: list[argparse.Namespace] = []
    fake = ModuleType("hami_core.sim.cli")

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--cluster")

    def run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 7

    fake.add_arguments = add_arguments  # type: ignore[attr-defined]
    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hami_core.sim.cli", fake)

    assert cli.main(["--log-level", "info", "simulate", "--cluster", "nodes.yaml"]) == 7

    [args] = seen
    assert args.cluster == "nodes.yaml"
    assert args.log_level == "INFO"


def test_broken_simulator_is_a_clean_error_and_does_not_break_plugins(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "hami_core.sim.cli", None)  # makes the import fail
    without_entry_points = functools.partial(get_plugin_manager, load_entrypoints=False)
    monkeypatch.setattr(pluginreport, "get_plugin_manager", without_entry_points)

    assert cli.main(["simulate"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("hami: error: hami simulate is unavailable: ModuleNotFoundError")

    assert cli.main(["plugins", "--json"]) == 0


def test_console_script_runs() -> None:
    script = Path(sys.executable).with_name("hami")
    if not script.exists():
        pytest.skip(f"{script} is absent: `pip install -e .` installs the console script")

    result = subprocess.run([str(script), "plugins"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "200"}, check=False)

    assert result.returncode == 0, result.stderr
    assert "hami plugins" in result.stdout
    assert "Status" in result.stdout


def test_a_component_that_cannot_load_says_which_extra_and_the_rest_work(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "hami_core.monitor.cli", None)  # as if hami-core[monitor] were not installed

    assert cli.main(["monitor", "--port", "0"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("hami: error: hami monitor is unavailable: ModuleNotFoundError")
    assert line.endswith("install 'hami-core[monitor]'")
    assert cli.main(["version"]) == 0


def test_building_the_parser_imports_no_service() -> None:
    """Every command's flags are built for ``hami --help``; none may pull in a service or its extra's packages."""
    heavy = ("grpc", "kubernetes", "prometheus_client", "uvicorn", "httptools", "cryptography", "hami_core.sim.cli",
             "hami_core.scheduler.app", "hami_core.node.app", "hami_core.monitor.service", "hami_core.cluster.kube")
    code = ("import sys; from hami_core.cli import _build_parser; _build_parser(); "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
