"""The per-backend hook relay: the core calls a backend's hooks on that backend alone.

A backend object (a :class:`~hami_core.plugins.types.DeviceBackend` whose class defines ``hami_*`` hook methods,
usually a :class:`~hami_core.plugins.standard.StandardBackend`) gets its own small pluggy manager, built once per
engine, holding the backend itself and the *cross-cutting* plugins (wrappers and other plugins that declare no
backend: a veto around ``hami_filter_nodes``, a test probe). So no vendor asks "is this backend mine?", and a
vendor's hook runs only for its own backend.

A backend declared by a plugin module that routes by itself (``hami_node_devices(backend, node)`` returning
``None`` for other backends, the contract before 0.2) is a *legacy* backend: its hooks go to the whole plugin
manager, as before, with the built-in defaults answering last. That path is deprecated (one release).

:class:`RoutedHooks` has the shape of ``pm.hook``: ``hooks.hami_filter_nodes(backend=b, ...)`` goes to ``b``'s
relay; every broadcast hook (policies, prescore, pod bound ...) is ``pm.hook``'s own caller.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pluggy

from hami_core.plugins import hookspecs
from hami_core.plugins.types import DeviceBackend

__all__ = ["PER_BACKEND_HOOKS", "RoutedHooks", "is_backend_object"]

log = logging.getLogger("hami.plugins")

#: Hooks whose first argument is the backend: routed to that backend alone.
PER_BACKEND_HOOKS: tuple[str, ...] = (
    "hami_node_devices", "hami_node_health", "hami_node_removed", "hami_mutate_container",
    "hami_container_request", "hami_filter_nodes", "hami_allocation_annotations", "hami_decode_allocation",
    "hami_node_lock", "hami_discover_devices", "hami_watch_health", "hami_allocate",
    "hami_dra_devices",
)
#: A broadcast hook a backend object may implement too: called for pods that request the backend.
BACKEND_SCORE_HOOK = "hami_score_nodes"
_BACKEND_HOOKS = frozenset((*PER_BACKEND_HOOKS, BACKEND_SCORE_HOOK))
#: Built-ins that give legacy backends HAMi's generic behaviour (a backend object brings its own).
_DEFAULT_PER_BACKEND = ("hami.default.health", "hami.default.codec", "hami.default.lock")
#: legacy plugins already warned about
_warned: set[str] = set()


def is_backend_object(backend: DeviceBackend) -> bool:
    """True when ``backend``'s class implements hooks itself (the per-backend shape)."""
    return any(name in _BACKEND_HOOKS for name in _hook_methods(type(backend)))


def _hook_methods(cls: type) -> Iterator[str]:
    for name in dir(cls):
        if name.startswith("hami_") and callable(getattr(cls, name, None)):
            yield name


class _BackendManager(pluggy.PluginManager):
    """A pluggy manager for one backend: its ``hami_*`` methods are hook implementations, marked or not (a
    subclass overriding a base-class hook need not repeat ``@hookimpl``). Calls run through the parent manager's
    executor, so its tracing (``HAMI_TRACE_PLUGINS``) and call monitors (the test kit's recorder) see them."""

    def __init__(self, backend: DeviceBackend, parent: pluggy.PluginManager) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self._backend = backend
        self._parent = parent

    def _hookexec(self, hook_name: str, methods: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object],
                  firstresult: bool) -> object | list[object]:
        return self._parent._hookexec(hook_name, methods, kwargs, firstresult)

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and plugin is self._backend and name in _BACKEND_HOOKS:
            return _inherited_opts(type(plugin), name)
        return opts


def _inherited_opts(cls: type, name: str) -> pluggy.HookimplOpts:
    """The ``@hookimpl`` options of the nearest base-class definition of ``name`` (plain ones if none)."""
    for base in cls.__mro__:
        opts = getattr(base.__dict__.get(name), f"{hookspecs.PROJECT_NAME}_impl", None)
        if opts is not None:
            return opts  # type: ignore[no-any-return]
    return pluggy.HookimplOpts(wrapper=False, hookwrapper=False, optionalhook=False, tryfirst=False,
                               trylast=False, specname=None)


class _Routed:
    """``hooks.<per-backend hook>``: a callable that sends the call to its ``backend=`` argument's relay."""

    __slots__ = ("_hooks", "_name")

    def __init__(self, hooks: RoutedHooks, name: str) -> None:
        self._hooks, self._name = hooks, name

    def __call__(self, *, backend: DeviceBackend, **kwargs: Any) -> Any:
        return getattr(self._hooks.relay(backend), self._name)(backend=backend, **kwargs)

    def get_hookimpls(self) -> list[pluggy.HookImpl]:
        """Every implementation any backend's relay holds (for introspection)."""
        seen: dict[int, pluggy.HookImpl] = {}
        for relay in self._hooks.relays():
            for impl in getattr(relay, self._name).get_hookimpls():
                seen.setdefault(id(impl), impl)
        return list(seen.values())


class RoutedHooks:
    """``pm.hook`` with the per-backend hooks routed: built once per engine (or device plugin) from the plugin
    manager and the enabled backends."""

    def __init__(self, pm: pluggy.PluginManager, backends: Iterable[DeviceBackend]) -> None:
        self._pm = pm
        self._crosscut = _crosscutting(pm)
        self._relays: dict[str, tuple[DeviceBackend, Any]] = {}
        #: plugin name → the backends it declared
        self._declared: dict[str, set[str]] = {impl.plugin_name: set()
                                               for impl in pm.hook.hami_device_backends.get_hookimpls()}
        self._score_cache: dict[frozenset[str], list[Callable[..., Any]]] = {}
        for backend in backends:
            self._relays[backend.name] = (backend, self._build(backend))
            self._declared.setdefault(backend.plugin, set()).add(backend.name)
        for name in PER_BACKEND_HOOKS:
            setattr(self, name, _Routed(self, name))

    def __getattr__(self, name: str) -> Any:  # broadcast hooks: the manager's own callers
        return getattr(self._pm.hook, name)

    def relay(self, backend: DeviceBackend) -> Any:
        """The hook namespace of ``backend`` (built on first use for a backend the engine did not list)."""
        known = self._relays.get(backend.name)
        if known is not None and known[0] is backend:
            return known[1]
        relay = self._build(backend)
        if known is None:
            self._relays[backend.name] = (backend, relay)
        return relay

    def relays(self) -> list[Any]:
        return [relay for _, relay in self._relays.values()]

    def score_callers(self, backend_names: Iterable[str]) -> list[Callable[..., Any]]:
        """The ``hami_score_nodes`` callers that may score a pod requesting ``backend_names``: every broadcast
        implementation but those of vendor plugins whose backends the pod does not request, plus each requested
        backend object's own. Empty: nothing scores the placement (best-first evaluation stays possible)."""
        wanted = frozenset(backend_names)
        cached = self._score_cache.get(wanted)
        if cached is not None:
            return cached
        unrequested = [self._pm.get_plugin(plugin) for plugin, names in self._declared.items() if not names & wanted]
        broadcast = self._pm.subset_hook_caller(BACKEND_SCORE_HOOK, [p for p in unrequested if p is not None])
        callers: list[Callable[..., Any]] = [broadcast] if broadcast.get_hookimpls() else []
        for name in sorted(wanted):
            entry = self._relays.get(name)
            if entry is None or entry[1] is self._pm.hook:
                continue  # unknown, or legacy (its plugin's score is a broadcast implementation)
            backend, relay = entry
            callers.extend(_single(impl) for impl in relay.hami_score_nodes.get_hookimpls() if impl.plugin is backend)
        self._score_cache[wanted] = callers
        return callers

    def _build(self, backend: DeviceBackend) -> Any:
        if not is_backend_object(backend):
            return self._pm.hook  # legacy: the plugin routes by itself
        sub = _BackendManager(backend, self._pm)
        sub.add_hookspecs(hookspecs)
        if not _is_standard(backend):
            for name in _DEFAULT_PER_BACKEND:
                plugin = self._pm.get_plugin(name)
                if plugin is not None:
                    sub.register(plugin, name=name)
        for name, plugin in self._crosscut:
            sub.register(plugin, name=name)
        sub.register(backend, name=f"backend:{backend.name}")
        return sub.hook


def _single(impl: pluggy.HookImpl) -> Callable[..., Any]:
    """Call one implementation as a one-answer broadcast hook (a list, like pluggy's)."""
    def call(**kwargs: Any) -> list[Any]:
        return [impl.function(**{arg: kwargs[arg] for arg in impl.argnames if arg in kwargs})]
    return call


def _is_standard(backend: DeviceBackend) -> bool:
    from hami_core.plugins.standard import StandardBackend

    return isinstance(backend, StandardBackend)


def _crosscutting(pm: pluggy.PluginManager) -> list[tuple[str, object]]:
    """Plugins that implement a per-backend hook without declaring backends (and are not built-in defaults):
    they apply to every backend."""
    declaring = {impl.plugin_name for impl in pm.hook.hami_device_backends.get_hookimpls()}
    implementing = _implementing(pm)
    return [(name, plugin) for name, plugin in pm.list_name_plugin()
            if plugin is not None and name in implementing and name not in declaring
            and name not in _DEFAULT_PER_BACKEND]


def _implementing(pm: pluggy.PluginManager, hooks: Iterable[str] = PER_BACKEND_HOOKS) -> set[str]:
    """Names of the plugins that implement one of ``hooks``."""
    return {impl.plugin_name for hook in hooks for impl in getattr(pm.hook, hook).get_hookimpls()}


def warn_legacy(plugin_name: str, who: str, pm: pluggy.PluginManager, backends: Sequence[DeviceBackend]) -> None:
    """Warn (once per process and plugin) when a plugin declares plain backends and routes its own per-backend hooks."""
    if not backends or any(is_backend_object(b) for b in backends):
        return
    if plugin_name in _warned:
        return
    routed = [hook for hook in PER_BACKEND_HOOKS if plugin_name in _implementing(pm, (hook,))]
    if not routed:
        return
    _warned.add(plugin_name)
    message = (f"plugin {who} routes per-backend hooks itself ({', '.join(routed)}); this contract is deprecated "
               f"and goes in hami-core 0.3: return StandardBackend subclasses from hami_device_backends "
               f"(docs/plugin-authoring.md, 'Migrating from module hooks')")
    log.warning("%s", message)
    warnings.warn(message, DeprecationWarning, stacklevel=2)
