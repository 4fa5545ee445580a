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

_STATUS_STYLE = {"loaded": "green", "builtin": "cyan", "failed": "red", "blocked": "yellow", "conflict": "red",
                 "broken": "red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami plugins``."""
    parser.description = (
        "List built-in and installed plugins, why any was skipped, and the device backends each registers with the "
        "device configuration (default: every vendor section at HAMi's chart defaults).")
    parser.add_argument("action", nargs="?", choices=("list", "check"), default="list",
                        help="list (default) the plugins; check: load every installed plugin, register its backends "
                             "(with --config's sections over every vendor's defaults, so a plugin --config does not "
                             "name is checked too) and exit 1 on any contract problem, failed import, name conflict "
                             "or registration hook that raises")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--config", metavar="PATH", help="device-config.yaml to compute backends with")


def run(args: argparse.Namespace) -> int:
    """``list`` (a table, or ``--json``) or ``check``."""
    if getattr(args, "action", "list") == "check":
        return _check(args)
    config = _config(getattr(args, "config", None), merge_defaults=False)
    pm = get_plugin_manager(blocked=config.blocked_plugins)
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


def _config(path: str | None, *, merge_defaults: bool) -> Any:
    """``--config``, or every vendor section at HAMi's chart defaults; ``merge_defaults`` lays ``--config``'s
    sections over those defaults, so that every installed vendor's registration hook runs (``check``)."""
    import yaml

    from hami_core.engine.config import EngineConfig, load_config
    from hami_core.sim.loader import bundled

    defaults = load_config(yaml.safe_load(bundled("device-config.yaml")))
    if not path:
        return defaults
    config = load_config(path)
    if not merge_defaults:
        return config
    return EngineConfig(devices={**defaults.devices, **config.devices}, scheduler=config.scheduler,
                        source=config.source, blocked_plugins=config.blocked_plugins)


def _plugin_rows(pm: HamiPluginManager, devices: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """One JSON-ready row per plugin report, plus why the backends together could not be computed (if so).

    Each plugin's registration hook is called on its own: one that raises is shown as ``broken`` with the cause,
    and the others still show their backends.
    """
    backends_error = None
    try:
        pm.backends(devices)
    except HamiError as exc:  # a name conflict, two plugins registering one backend, a broken hook
        backends_error = one_line(exc)
    by_plugin = pm.backends_by_plugin(devices)

    rows = []
    for report in pm.reports:
        status, reason, backends = report.status, report.reason, []
        if status in ("loaded", "builtin"):
            registered = by_plugin.get(report.name, [])
            if isinstance(registered, Exception):
                status, reason, backends = "broken", one_line(registered), None
            else:
                backends = registered
        rows.append({"name": report.name, "distribution": report.distribution, "version": report.version,
                     "status": status, "reason": reason, "backends": backends})
    return rows, backends_error


def _check(args: argparse.Namespace) -> int:
    """Load every plugin and register its backends; report each problem on one line; exit 1 if any."""
    from hami_core.engine.facade import Engine

    problems: list[str] = []
    config = _config(getattr(args, "config", None), merge_defaults=True)
    try:
        pm = get_plugin_manager(blocked=config.blocked_plugins)
    except HamiError as exc:  # a contract error (bad signature, unknown hook, duplicate name) names the plugin
        problems.append(one_line(exc))
        pm = None
    if pm is not None:
        problems += [f"plugin {r.name} ({r.distribution or '?'} {r.version or ''}): failed to load: {r.reason}"
                     for r in pm.reports if r.status == "failed"]
        problems += [pm.conflicts[name] for name in sorted(pm.conflicts)]
        problems += [one_line(result) for result in pm.backends_by_plugin(config.devices).values()
                     if isinstance(result, Exception)]
        if problems:  # the engine would only repeat the first of them
            pm = None
    if pm is not None:
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
