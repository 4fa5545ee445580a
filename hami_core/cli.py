"""The ``hami`` command: ``hami plugins``, ``hami version`` and ``hami simulate``.

Errors raised by hami-core (:class:`HamiError`) are printed as one line, ``hami: error: <message>``,
with exit status 1; no traceback reaches the user. Usage errors exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import HamiPluginManager, get_plugin_manager

__all__ = ["main"]

PROG = "hami"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LOG_LEVEL = "WARNING"
_STATUS_STYLE = {"loaded": "green", "builtin": "cyan", "failed": "red", "blocked": "yellow"}

Handler = Callable[[argparse.Namespace, list[str]], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hami`` command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = _build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        if extra and args.command != "simulate":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return _exit_status(exc)

    args.log_level = getattr(args, "log_level", DEFAULT_LOG_LEVEL)
    _configure_logging(args.log_level)
    handler: Handler = args.handler
    try:
        return handler(args, extra)
    except HamiError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _build_parser() -> argparse.ArgumentParser:
    # --log-level is accepted before or after the subcommand. The parsers share this one action, so its
    # default must stay SUPPRESS (a subcommand would otherwise overwrite a value given before it); main()
    # supplies the real default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help=f"logging threshold on stderr (default: {DEFAULT_LOG_LEVEL})")

    parser = argparse.ArgumentParser(prog=PROG, parents=[common],
                                     description="HAMi GPU-sharing scheduler: plugins, simulation, version.")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    plugins = commands.add_parser(
        "plugins", parents=[common], help="list plugins and the backends they register",
        description="List built-in and installed plugins, why any was skipped, and the device backends each "
                    "registers with the device configuration (default: every vendor section at HAMi's chart defaults).")
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.add_argument("--config", metavar="PATH", help="device-config.yaml to compute backends with")
    plugins.set_defaults(command="plugins", handler=_cmd_plugins)

    version = commands.add_parser("version", parents=[common], help="print the hami-core version")
    version.set_defaults(command="version", handler=_cmd_version)

    # The simulator defines its own arguments; they are parsed only once it is imported, so a broken
    # simulator cannot break `hami plugins`.
    simulate = commands.add_parser("simulate", parents=[common], add_help=False,
                                   help="place a workload onto a cluster in-process (hami simulate -h)")
    simulate.set_defaults(command="simulate", handler=_cmd_simulate)
    return parser


def _cmd_plugins(args: argparse.Namespace, _extra: list[str]) -> int:
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
        by_plugin, backends_error = None, _one_line(exc)

    rows = []
    for report in pm.reports:
        active = report.status in ("loaded", "builtin")
        backends = (by_plugin.get(report.name, []) if by_plugin is not None else None) if active else []
        rows.append({"name": report.name, "distribution": report.distribution, "version": report.version,
                     "status": report.status, "reason": report.reason, "backends": backends})
    return rows, backends_error


def _cmd_version(_args: argparse.Namespace, _extra: list[str]) -> int:
    from hami_core import __version__

    print(f"hami-core {__version__}")
    return 0


def _cmd_simulate(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        sim_cli = importlib.import_module("hami_core.sim.cli")
    except ImportError as exc:
        raise HamiError(f"hami simulate is unavailable: {type(exc).__name__}: {exc}") from exc

    parser = argparse.ArgumentParser(prog=f"{PROG} simulate")
    sim_cli.add_arguments(parser)
    try:
        sim_args = parser.parse_args(extra)
    except SystemExit as exc:
        return _exit_status(exc)
    sim_args.log_level = args.log_level
    return sim_cli.run(sim_args)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


if __name__ == "__main__":
    raise SystemExit(main())
