"""A hook-call recorder, modelled on pytest's ``HookRecorder`` and built on pluggy's call monitoring."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

__all__ = ["HookCall", "HookRecorder"]


@dataclass(frozen=True, slots=True)
class HookCall:
    """One call of a ``hami_*`` hook: its name, keyword arguments, the plugins called and the outcome.

    ``result`` is the hook's return value (a list, or one value for *firstresult* hooks) and ``exception``
    what it raised, if anything.
    """

    name: str
    kwargs: Mapping[str, Any]
    plugins: tuple[str, ...] = ()
    result: Any = None
    exception: BaseException | None = field(default=None, compare=False)

    def __getattr__(self, key: str) -> Any:
        # ``call.backend`` reads the ``backend`` argument, as pytest's ``RecordedHookCall`` does.
        try:
            return self.kwargs[key]
        except KeyError:
            raise AttributeError(key) from None


class HookRecorder:
    """Record every hook call of a plugin manager until :meth:`finish_recording`.

    >>> recorder = HookRecorder(pm)
    >>> engine.schedule(pod)
    >>> recorder.getcall("hami_filter_nodes").request.nums
    1
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.calls: list[HookCall] = []
        self._pm = pm

        def before(hook_name: str, hook_impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
            pass

        def after(outcome: Any, hook_name: str, hook_impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
            plugins = tuple(impl.plugin_name for impl in hook_impls)
            exc = outcome.exception
            result = None if exc is not None else outcome.get_result()
            self.calls.append(HookCall(hook_name, dict(kwargs), plugins, result, exc))

        self._undo = pm.add_hookcall_monitoring(before, after)

    def finish_recording(self) -> None:
        """Stop recording (idempotent)."""
        if self._undo is not None:
            self._undo()
            self._undo = None

    def clear(self) -> None:
        self.calls.clear()

    def names(self) -> list[str]:
        """Names of the hooks called, in call order."""
        return [c.name for c in self.calls]

    def getcalls(self, names: str | Iterable[str]) -> list[HookCall]:
        """Calls of the hooks in ``names`` (a list, or one string of space-separated names), in order."""
        wanted = set(names.split()) if isinstance(names, str) else set(names)
        return [c for c in self.calls if c.name in wanted]

    def getcall(self, name: str) -> HookCall:
        """The only call of hook ``name``; fails when there are none or several."""
        calls = self.getcalls(name)
        assert len(calls) == 1, f"expected one call of {name}, got {len(calls)}: {self.names()}"
        return calls[0]

    def assert_called(self, name: str, times: int | None = None) -> list[HookCall]:
        """Assert ``name`` was called (exactly ``times`` times, when given); return those calls."""
        calls = self.getcalls(name)
        if times is None:
            assert calls, f"{name} was never called; calls were {self.names()}"
        else:
            assert len(calls) == times, f"{name} was called {len(calls)} times, expected {times}"
        return calls

    def assert_not_called(self, name: str) -> None:
        assert not self.getcalls(name), f"{name} was called: {self.getcalls(name)}"
