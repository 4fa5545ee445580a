"""Bind's mirror ledgers moved into the engine with the over-commit check they serve: see
:mod:`hami_core.engine.bindcheck` (:meth:`Engine.check_bind <hami_core.engine.facade.Engine.check_bind>`). Kept
so that ``from hami_core.scheduler.bound import BoundLedgers`` still works."""

from __future__ import annotations

from hami_core.engine.bindcheck import BoundLedgers

__all__ = ["BoundLedgers"]
