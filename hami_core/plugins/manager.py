"""Build the plugin manager: built-in plugins, ``hami.devices`` entry points, explicit plugins.

Nothing here is global: :func:`get_plugin_manager` returns a fresh :class:`HamiPluginManager` on every
call, so several engines (or tests) can live in one process.

Loading follows one rule: an *environment* problem (a vendor SDK that is not installed, a plugin that
fails to import) skips that plugin and is recorded in :attr:`HamiPluginManager.reports`; a *contract*
problem (bad hook signature, unknown hook, duplicate name) raises :class:`PluginError` naming the
entry point and its distribution.

Two installed distributions declaring the same entry-point name are an *installation* problem, not a plugin
author's: neither is loaded, both are reported as ``conflict`` naming the other, and :meth:`backends` (what every
component needs) refuses with one message that names both and the fix, so that ``hami plugins``, ``hami plugins
check`` and ``hami version`` still work. Operators block a plugin by entry-point or distribution name with
``HAMI_BLOCK_PLUGINS`` (comma-separated) or the device config's ``plugins: {blocked: [...]}``.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import importlib_metadata
import pluggy
import stevedore

import hami_core
from hami_core.plugins import hookspecs
from hami_core.plugins.errors import ConfigError, PluginError
from hami_core.plugins.relay import warn_legacy
from hami_core.plugins.types import DeviceBackend

__all__ = [
    "BLOCK_ENV_VAR",
    "ENTRY_POINT_GROUP",
    "TRACE_ENV_VAR",
    "HamiPluginManager",
    "PluginReport",
    "PluginStatus",
    "get_plugin_manager",
]

#: Entry-point group vendor distributions declare their plugin module in.
ENTRY_POINT_GROUP = "hami.devices"
#: Set to ``1`` to log every hook call to the ``hami.plugins`` logger at DEBUG.
TRACE_ENV_VAR = "HAMI_TRACE_PLUGINS"
#: Comma-separated entry-point or distribution names not to load (added to the config's ``plugins.blocked``).
BLOCK_ENV_VAR = "HAMI_BLOCK_PLUGINS"
#: Prefix of the names built-in plugins are registered under.
BUILTIN_PREFIX = "hami.default."

_REPORT_TO_AUTHOR = "report this to the plugin author"

logger = logging.getLogger("hami.plugins")

PluginStatus = Literal["loaded", "failed", "blocked", "builtin", "conflict"]


@dataclass(frozen=True, slots=True)
class PluginReport:
    """What happened to one plugin while the manager was built.

    ``distribution`` and ``version`` are ``None`` for plugins passed explicitly. ``reason`` says why a
    plugin was skipped (``"ImportError: ..."``) or blocked; it is empty for loaded plugins.
    """

    name: str
    distribution: str | None
    version: str | None
    status: PluginStatus
    reason: str = ""


class HamiPluginManager(pluggy.PluginManager):
    """A :class:`pluggy.PluginManager` for the ``hami`` project that remembers where plugins came from.

    Build it with :func:`get_plugin_manager`; the constructor alone registers no specs and no plugins.
    """

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        #: One report per plugin considered, in registration order.
        self.reports: list[PluginReport] = []
        self._origins: dict[str, tuple[str | None, str | None]] = {}
        #: entry-point names declared by more than one installed distribution -> the operator-facing message
        self.conflicts: dict[str, str] = {}

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith("hami_") and callable(getattr(plugin, name, None)):
            # pluggy silently ignores an unmarked function; a forgotten @hookimpl should not go unnoticed.
            logger.warning("plugin %r: function %s looks like a hook implementation but has no @hookimpl "
                           "marker, so it is ignored", getattr(plugin, "__name__", plugin), name)
        return opts

    def distribution_of(self, name: str) -> str | None:
        """The distribution that provided the plugin registered as ``name`` (``None`` if unknown)."""
        return self._origins.get(name, (None, None))[0]

    def describe(self, name: str) -> str:
        """``name`` plus its distribution and version, for messages: ``'nvidia' (hami-nvidia 1.2)``."""
        dist, version = self._origins.get(name, (None, None))
        return _describe(name, dist, version)

    def backends(self, config: Mapping[str, Any]) -> list[DeviceBackend]:
        """Collect every plugin's :func:`~hami_core.plugins.hookspecs.hami_device_backends`, sorted by name.

        Each implementation is called on its own, so a failure names the plugin that caused it, and each
        backend gets ``plugin`` set to that plugin's name. A :class:`ConfigError` (the operator's
        configuration is wrong) propagates unchanged; any other exception, a result that is not a
        :class:`DeviceBackend`, or two backends with the same ``name`` raise :class:`PluginError`.
        """
        if self.conflicts:
            raise PluginError("; ".join(self.conflicts[name] for name in sorted(self.conflicts)))
        by_name: dict[str, DeviceBackend] = {}
        for impl in self.hook.hami_device_backends.get_hookimpls():
            who = self.describe(impl.plugin_name)
            for item in self._backends_of(impl, config):
                previous = by_name.get(item.name)
                if previous is not None:
                    first = self.describe(previous.plugin)
                    raise PluginError(f"backend {item.name!r} is registered twice: by plugin {first} "
                                      f"and by plugin {who}; {_REPORT_TO_AUTHOR}")
                by_name[item.name] = dataclasses.replace(item, plugin=impl.plugin_name)
            logger.debug("plugin %s registers backends %s", who, [item.name for item in by_name.values()
                                                                 if item.plugin == impl.plugin_name])
        return [by_name[name] for name in sorted(by_name)]

    def backends_by_plugin(self, config: Mapping[str, Any]) -> dict[str, list[str] | PluginError | ConfigError]:
        """Each plugin's backend names under ``config``, or the error its hook raised: one broken plugin does
        not hide what the others register (``hami plugins`` shows it as broken, with the cause)."""
        result: dict[str, list[str] | PluginError | ConfigError] = {}
        for impl in self.hook.hami_device_backends.get_hookimpls():
            try:
                result[impl.plugin_name] = sorted(item.name for item in self._backends_of(impl, config))
            except (PluginError, ConfigError) as exc:
                result[impl.plugin_name] = exc
        return result

    def _backends_of(self, impl: Any, config: Mapping[str, Any]) -> list[DeviceBackend]:
        """Call one plugin's ``hami_device_backends``; anything but a list of backends is a :class:`PluginError`."""
        who = self.describe(impl.plugin_name)
        if impl.wrapper or impl.hookwrapper:
            raise PluginError(f"plugin {who}: hami_device_backends cannot be a wrapper; {_REPORT_TO_AUTHOR}")
        available = {"config": config}
        try:
            result = impl.function(**{arg: available[arg] for arg in impl.argnames})
            items = [] if result is None else list(result)
        except ConfigError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {who}: hami_device_backends failed: {type(exc).__name__}: {exc}; "
                              f"{_REPORT_TO_AUTHOR}") from exc
        for item in items:
            if not isinstance(item, DeviceBackend):
                raise PluginError(f"plugin {who}: hami_device_backends returned {type(item).__name__} "
                                  f"{item!r}, expected DeviceBackend; {_REPORT_TO_AUTHOR}")
        warn_legacy(impl.plugin_name, who, self, items)
        return items

    def _register_reported(self, plugin: object, name: str, dist: str | None, version: str | None,
                           status: PluginStatus, kind: str) -> None:
        """Register ``plugin`` and record it; turn pluggy's validation errors into :class:`PluginError`."""
        who = f"{kind} {_describe(name, dist, version)}"
        try:
            registered = self.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"{who} breaks the hook contract: {exc}; {_REPORT_TO_AUTHOR}") from exc
        except ValueError as exc:
            raise PluginError(self._duplicate_message(plugin, name, who)) from exc
        if registered is None:
            self.reports.append(PluginReport(name, dist, version, "blocked", "blocked by configuration"))
            return
        self._origins[name] = (dist, version)
        self.reports.append(PluginReport(name, dist, version, status))

    def _duplicate_message(self, plugin: object, name: str, who: str) -> str:
        if self.has_plugin(name):
            clash = f"the name {name!r} is already taken by plugin {self.describe(name)}"
        else:
            other = self.describe(self.get_name(plugin) or "?")
            clash = f"the same plugin object is already registered as {other}"
        return f"{who} cannot be registered: {clash}; {_REPORT_TO_AUTHOR}"


def get_plugin_manager(
    *,
    load_entrypoints: bool = True,
    blocked: Iterable[str] = (),
    plugins: Iterable[object] = (),
) -> HamiPluginManager:
    """Return a new plugin manager holding the built-in plugins, the installed ones and ``plugins``.

    Order of registration (pluggy calls the last registered first): built-ins from
    :data:`hami_core.default_plugins.DEFAULT_PLUGINS`, then the ``hami.devices`` entry points (when
    ``load_entrypoints``; entry points whose name or distribution is in ``blocked`` or ``$HAMI_BLOCK_PLUGINS``
    are not even imported), then ``plugins``, each named by its ``__name__``. Raises :class:`PluginError` on a
    contract error; see the module docstring.
    """
    pm = HamiPluginManager()
    if _env_flag(TRACE_ENV_VAR):
        pm.trace.root.setwriter(lambda message: logger.debug("%s", message.rstrip()))
        pm.enable_tracing()
    pm.add_hookspecs(hookspecs)

    _register_builtins(pm)
    if load_entrypoints:
        _load_entrypoints(pm, frozenset(_normal(n) for n in (*blocked, *_env_names(BLOCK_ENV_VAR))))
    for plugin in plugins:
        name = getattr(plugin, "__name__", None) or repr(plugin)
        pm._register_reported(plugin, name, None, None, "loaded", "plugin")

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) or repr(exc.plugin)
        raise PluginError(f"plugin {pm.describe(name)} implements an unknown hook: {exc}; "
                          f"{_REPORT_TO_AUTHOR}") from exc
    return pm


def _register_builtins(pm: HamiPluginManager) -> None:
    # Imported by name so a default plugin is registered exactly like a vendor one (STYLE rule 7).
    default_plugins = importlib.import_module("hami_core.default_plugins")
    for module_path in getattr(default_plugins, "DEFAULT_PLUGINS", ()):
        module = importlib.import_module(module_path)
        name = BUILTIN_PREFIX + module_path.rsplit(".", 1)[-1]
        pm._register_reported(module, name, "hami-core", hami_core.__version__, "builtin", "built-in plugin")


class _EntryPointLoader(stevedore.NamedExtensionManager):
    """stevedore's loader, fed with entry points read by :mod:`importlib_metadata`.

    stevedore caches entry points three ways: a class-level ``ENTRY_POINT_CACHE`` keyed only by group
    (shared by every manager in the process, never refreshed), a per-``sys.path`` memo, and files under
    ``~/.cache/python-entrypoints`` keyed by ``sys.path`` entries' mtimes packed as 32-bit floats (about
    two minutes of resolution). Its cached entry points also lose ``.dist``, which every report and
    error message needs. Overriding :meth:`list_entry_points` bypasses all three.
    """

    def __init__(self, entry_points: Sequence[importlib_metadata.EntryPoint], names: Sequence[str],
                 on_load_failure: stevedore.extension.OnLoadFailureCallbackT[Any]) -> None:
        self._entry_points = list(entry_points)
        super().__init__(ENTRY_POINT_GROUP, names=names, invoke_on_load=False,
                         on_load_failure_callback=on_load_failure, on_missing_entrypoints_callback=None)

    def list_entry_points(self) -> list[importlib_metadata.EntryPoint]:  # type: ignore[override]
        return self._entry_points


def _load_entrypoints(pm: HamiPluginManager, blocked: frozenset[str]) -> None:
    entry_points = list(importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))
    failures: dict[int, tuple[str, BaseException]] = {}

    def on_load_failure(_manager: object, ep: importlib_metadata.EntryPoint, exc: BaseException) -> None:
        dist, version = _origin(ep)
        who = f"entry point {_describe(ep.name, dist, version)} = {ep.value}"
        if _missing_dependency(ep, exc):
            logger.debug("skipping %s: %s is not installed", who, getattr(exc, "name", "?"))
        else:
            logger.warning("skipping %s: %s: %s", who, type(exc).__name__, exc)
        failures[id(ep)] = (f"{type(exc).__name__}: {exc}", exc)

    def is_blocked(ep: importlib_metadata.EntryPoint) -> bool:
        dist = _origin(ep)[0]
        return _normal(ep.name) in blocked or (dist is not None and _normal(dist) in blocked)

    declared: dict[str, list[importlib_metadata.EntryPoint]] = {}
    for ep in entry_points:
        if not is_blocked(ep):
            declared.setdefault(ep.name, []).append(ep)
    clashing = {name: eps for name, eps in declared.items() if len(eps) > 1}
    for name, eps in clashing.items():
        who = " and ".join(_describe_dist(ep) for ep in eps)
        pm.conflicts[name] = (
            f"two installed distributions declare the {ENTRY_POINT_GROUP} entry point {name!r}: {who}; neither is "
            f"loaded. Uninstall one, or block one by distribution name: {BLOCK_ENV_VAR}="
            + " or =".join(_origin(ep)[0] or name for ep in eps) + " (or plugins.blocked in the device config)")

    names = [name for name in declared if name not in clashing]
    loader = _EntryPointLoader([ep for ep in entry_points if ep.name in names and not is_blocked(ep)], names,
                               on_load_failure)
    loaded = {id(ext.entry_point): ext.plugin for ext in loader.extensions}

    for ep in entry_points:
        dist, version = _origin(ep)
        if is_blocked(ep):
            if ep.name not in declared:  # blocked by distribution while another one keeps the name: keep it open
                pm.set_blocked(ep.name)
            pm.reports.append(PluginReport(ep.name, dist, version, "blocked", "blocked by configuration"))
        elif ep.name in clashing:
            others = " and ".join(_describe_dist(o) for o in clashing[ep.name] if o is not ep)
            pm.reports.append(PluginReport(ep.name, dist, version, "conflict",
                                           f"the entry point name is also declared by {others}"))
        elif id(ep) in failures:
            pm.reports.append(PluginReport(ep.name, dist, version, "failed", failures[id(ep)][0]))
        elif id(ep) in loaded:
            pm._register_reported(loaded[id(ep)], ep.name, dist, version, "loaded", "entry point")


def _describe_dist(ep: importlib_metadata.EntryPoint) -> str:
    dist, version = _origin(ep)
    return f"{dist or '?'} {version or ''}".strip() + f" ({ep.value})"


def _normal(name: str) -> str:
    """Names compare as pip compares distributions: case-blind, ``_`` and ``.`` as ``-``."""
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _env_names(var: str) -> list[str]:
    return [part for part in os.environ.get(var, "").replace(" ", ",").split(",") if part.strip()]


def _missing_dependency(ep: importlib_metadata.EntryPoint, exc: BaseException) -> bool:
    """True when ``exc`` says a module *outside* the plugin's own package is missing (its vendor SDK).

    A missing module inside the plugin's own package is a packaging bug (a wrong entry point string),
    which must not be hidden at DEBUG level.
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return False
    own_package = ep.value.split(":", 1)[0].strip().split(".", 1)[0]
    return exc.name.split(".", 1)[0] != own_package


def _origin(ep: importlib_metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.name, dist.version


def _describe(name: str, dist: str | None, version: str | None) -> str:
    if dist is None:
        return repr(name)
    return f"{name!r} ({dist} {version})" if version else f"{name!r} ({dist})"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")
