"""The ``hami`` command: one subcommand per component, each defined by the component itself.

A command is a module with ``add_arguments(parser)`` and ``run(args) -> int`` (:data:`COMMANDS` names them);
this module only builds the parser, sets up logging and turns errors into exit statuses. A component's command
module is imported when the parser is built, so it must import nothing heavy at module level (its ``run`` imports
the service); one that cannot be imported (its extra is not installed, or it is broken) leaves its command
reporting why and every other command working. ``simulate`` is imported only when it runs (``lazy``).

Errors raised by hami-core (:class:`HamiError`) are printed as one line, ``hami: error: <message>``,
with exit status 1; no traceback reaches the user. Usage errors exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.cmdline import UsageError, one_line, unavailable
from hami_core.plugins.errors import HamiError

__all__ = ["COMMANDS", "Command", "main"]

PROG = "hami"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LOG_LEVEL = "WARNING"
#: The long-running servers log at INFO by default: an operator sees where they listen and what they do (their
#: startup lines are INFO, not warnings); one-shot commands stay quiet unless something is wrong.
SERVER_LOG_LEVEL = "INFO"


@dataclass(frozen=True)
class Command:
    """One ``hami`` subcommand: ``module``'s ``add`` function adds its flags, its ``run`` function runs it."""

    name: str
    module: str
    help: str
    add: str = "add_arguments"
    run: str = "run"
    #: the optional dependencies the command needs (``pip install 'hami-core[<extra>]'``), named when it cannot load
    extra: str | None = None
    #: import the module only when the command runs, and parse its flags then (``hami simulate -h``): its import
    #: is heavy, and every other command works without it
    lazy: bool = False
    #: the logging threshold without ``--log-level``
    log_level: str = DEFAULT_LOG_LEVEL


COMMANDS: tuple[Command, ...] = (
    Command("plugins", "hami_core.pluginreport", "list plugins and the backends they register"),
    Command("version", __name__, "print the hami-core version", add="add_version_arguments", run="run_version"),
    Command("explain", "hami_core.explain", "why a pod is pending: each node's, device's and check's verdict"),
    Command("defrag", "hami_core.defrag.cli", "plan or apply pod moves that free whole devices (hami defrag plan)"),
    Command("simulate", "hami_core.sim.cli", "place a workload onto a cluster in-process (hami simulate -h)",
            lazy=True),
    Command("scheduler", "hami_core.scheduler.cli", "serve the kube-scheduler extender and admission webhook",
            extra="scheduler", log_level=SERVER_LOG_LEVEL),
    Command("monitor", "hami_core.monitor.cli", "export per-container GPU usage from HAMi-core's shared regions",
            extra="monitor", log_level=SERVER_LOG_LEVEL),
    Command("device-plugin", "hami_core.node.cli", "serve the kubelet device plugin for one vendor on this node",
            extra="node", log_level=SERVER_LOG_LEVEL),
    Command("certs", "hami_core.scheduler.cli", "write a self-signed TLS certificate and key",
            add="add_certs_arguments", run="run_certs", extra="scheduler"),
    Command("dra-driver", "hami_core.dra.cli", "publish this node's devices as DRA ResourceSlices (resource.k8s.io/v1)",
            extra="node", log_level=SERVER_LOG_LEVEL),
)

Handler = Callable[[argparse.Namespace, list[str]], int]
_COMMAND_LOG_LEVELS = {command.name: command.log_level for command in COMMANDS}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hami`` command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = _build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        if extra and not args.takes_extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return _exit_status(exc)

    args.log_level = getattr(args, "log_level", None) or _COMMAND_LOG_LEVELS.get(args.command, DEFAULT_LOG_LEVEL)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    handler: Handler = args.handler
    try:
        return handler(args, extra)
    except UsageError as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except HamiError as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _build_parser() -> argparse.ArgumentParser:
    # --log-level is accepted before or after the subcommand. The parsers share this one action, so its
    # default must stay SUPPRESS (a subcommand would otherwise overwrite a value given before it); main()
    # supplies the real default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help=f"logging threshold on stderr (default: {SERVER_LOG_LEVEL} for the servers "
                             f"scheduler, monitor and device-plugin, {DEFAULT_LOG_LEVEL} otherwise)")

    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common],
        description="HAMi GPU-sharing scheduler, device plugin and monitor: one command per component.")
    from hami_core import __version__

    # the same text as `hami version`, for scripts that expect a top-level --version
    parser.add_argument("--version", action="version", version=f"hami-core {__version__}")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        _add_command(commands, common, command)
    return parser


def _add_command(commands: Any, common: argparse.ArgumentParser, command: Command) -> None:
    if command.lazy:
        _pass_through(commands, common, command, lambda args, extra: _run_lazy(command, args, extra))
        return
    try:
        module = importlib.import_module(command.module)
    except Exception as exc:  # an uninstalled extra or a broken module: this command says so, the others work
        error = unavailable(command.name, command.extra, exc)
        _pass_through(commands, common, command, lambda _args, _extra: _raise(error))
        return
    sub = commands.add_parser(command.name, parents=[common], help=command.help)
    getattr(module, command.add)(sub)
    run = getattr(module, command.run)
    sub.set_defaults(command=command.name, takes_extra=False, handler=lambda args, _extra: run(args))


def _pass_through(commands: Any, common: argparse.ArgumentParser, command: Command, handler: Handler) -> None:
    """A subparser that hands every argument after the command name to ``handler`` (``-h`` included)."""
    sub = commands.add_parser(command.name, parents=[common], add_help=False, help=command.help)
    sub.set_defaults(command=command.name, takes_extra=True, handler=handler)


def _run_lazy(command: Command, args: argparse.Namespace, extra: list[str]) -> int:
    try:
        module = importlib.import_module(command.module)
    except ImportError as exc:
        raise unavailable(command.name, command.extra, exc) from exc
    parser = argparse.ArgumentParser(prog=f"{PROG} {command.name}")
    getattr(module, command.add)(parser)
    try:
        own = parser.parse_args(extra)
    except SystemExit as exc:
        return _exit_status(exc)
    own.log_level = args.log_level
    return int(getattr(module, command.run)(own))


def _raise(exc: BaseException) -> int:
    raise exc


# ------------------------------------------------------------------------------------------ hami version

def add_version_arguments(parser: argparse.ArgumentParser) -> None:
    """``hami version`` takes no flags."""


def run_version(_args: argparse.Namespace) -> int:
    from hami_core import __version__

    print(f"hami-core {__version__}")
    return 0


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


if __name__ == "__main__":
    raise SystemExit(main())
