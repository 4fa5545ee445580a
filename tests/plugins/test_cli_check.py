"""`hami plugins check`: every installed plugin loads and keeps the contract, or the command says who did not."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from hami_core.cli import main


def test_check_passes_with_the_installed_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "check"]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_check_reports_failed_imports(add_dists: Callable[..., None], capsys: pytest.CaptureFixture[str]) -> None:
    add_dists("good")
    assert main(["plugins", "check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"]
    failed = " ".join(report["problems"])
    for name in ("importerror", "sdkmissing", "crash", "wrongpath"):
        assert f"plugin {name} (hami-test-plugins" in failed


def test_check_names_the_plugin_that_breaks_the_contract(add_dists: Callable[..., None],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    add_dists("badsignature")
    assert main(["plugins", "check"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("problem: ") and "badsignature" in out and "report this to the plugin author" in out


def test_the_example_vendor_is_installed_and_loaded() -> None:
    """examples/hami-example-vendor is installed by `make test` like a user's plugin and loads by entry point."""
    import importlib.metadata

    from hami_core.plugins.manager import get_plugin_manager

    if "acme" not in {ep.name for ep in importlib.metadata.entry_points(group="hami.devices")}:
        pytest.skip("hami-acme (examples/hami-example-vendor) is not installed; `make test` installs it")
    report = {r.name: r for r in get_plugin_manager().reports}["acme"]
    assert (report.status, report.distribution) == ("loaded", "hami-acme")
