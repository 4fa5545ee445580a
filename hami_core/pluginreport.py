"""``hami plugins``: the built-in and installed plugins, why any was skipped, the backends each registers
(``list``), and whether every plugin loads and keeps the contract (``check``); its ``add_arguments`` and ``run``,
dispatched by :mod:`hami_core.cli`.

A plugin author's tool as much as an operator's: it needs only hami-core's own dependencies (no extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from hami_core.cmdline import one_line
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import HamiPluginManager, get_plugin_manager

__all__ = ["add_arguments", "run"]

_STATUS_STYLE = {"loaded": "green", "builtin": "cyan", "failed": "red", "blocked": "yellow"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami plugins``."""
    parser.description = (
        "List built-in and installed plugins, why any was skipped, and the device backends each registers with the "
        "device configuration (default: every vendor section at HAMi's chart defaults).")
    parser.add_argument("action", nargs="?", choices=("list", "check"), default="list",
                        help="list (default) the plugins; check: load every plugin, register its backends and "
                             "exit 1 on any contract problem or failed import")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--config", metavar="PATH", help="device-config.yaml to compute backends with")


def run(args: argparse.Namespace) -> int:
    """``list`` (a table, or ``--json``) or ``check``."""
    if getattr(args, "action", "list") == "check":
        return _check(args)
    pm = get_plugin_manager()
    import yaml

    from hami_core.engine.config import load_config
    from hami_core.sim.loader import bundled

    path = getattr(args, "config", None)
    # Without a config, show what each plugin registers with every vendor section at HAMi's chart defaults.
    config = load_config(path) if path else load_config(yaml.safe_load(bundled("device-config.yaml")))
    rows, backends_error = _plugin_rows(pm, config.devices)
    if args.json:
        json.dump({"plugins": rows, "backends_error": backends_error}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    from rich.console import Console
    from rich.table import Table

    table = Table(title="hami plugins")
    for column in ("Name", "Distribution", "Version", "Status", "Backends", "Reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        backends = "?" if row["backends"] is None else ", ".join(row["backends"])
        status = row["status"]
        table.add_row(row["name"], row["distribution"] or "", row["version"] or "",
                      f"[{_STATUS_STYLE.get(status, 'default')}]{status}[/]", backends, row["reason"])
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 140)
    console.print(table)
    if backends_error:
        console.print(f"backends could not be computed with the default configuration: {backends_error}",
                      markup=False)
    return 0


def _plugin_rows(pm: HamiPluginManager, devices: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """One JSON-ready row per plugin report, plus why backends could not be computed (if so)."""
    by_plugin: dict[str, list[str]] | None = {}
    backends_error = None
    try:
        for backend in pm.backends(devices):
            by_plugin.setdefault(backend.plugin, []).append(backend.name)
    except HamiError as exc:
        by_plugin, backends_error = None, one_line(exc)

    rows = []
    for report in pm.reports:
        active = report.status in ("loaded", "builtin")
        backends = (by_plugin.get(report.name, []) if by_plugin is not None else None) if active else []
        rows.append({"name": report.name, "distribution": report.distribution, "version": report.version,
                     "status": report.status, "reason": report.reason, "backends": backends})
    return rows, backends_error


def _check(args: argparse.Namespace) -> int:
    """Load every plugin and register its backends; report each problem on one line; exit 1 if any."""
    import yaml

    from hami_core.engine.config import load_config
    from hami_core.engine.facade import Engine
    from hami_core.sim.loader import bundled

    problems: list[str] = []
    try:
        pm = get_plugin_manager()
    except HamiError as exc:  # a contract error (bad signature, unknown hook, duplicate name) names the plugin
        problems.append(one_line(exc))
        pm = None
    if pm is not None:
        problems += [f"plugin {r.name} ({r.distribution or '?'} {r.version or ''}): failed to load: {r.reason}"
                     for r in pm.reports if r.status == "failed"]
        path = getattr(args, "config", None)
        config = load_config(path) if path else load_config(yaml.safe_load(bundled("device-config.yaml")))
        try:
            engine = Engine(config, plugins=pm)
            engine.policies()
        except HamiError as exc:
            problems.append(one_line(exc))
    if args.json:
        json.dump({"ok": not problems, "problems": problems}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif problems:
        for line in problems:
            print(f"problem: {line}")
    else:
        print(f"ok: {len(pm.reports) if pm else 0} plugins loaded, contracts valid")
    return 1 if problems else 0
