"""Device types kept for the pods that can use nothing else: the ``fgd`` policy's reservation term.

FGD's measure counts fragments, free share that a class of the mix cannot use. Share a pod *takes* is no fragment
to anyone, so the measure never charges a pod for taking a device type that other classes need more: an
unconstrained pod placed on a T4 grows the T4-only classes' fragments by nothing, and it even shrinks the fragments
of every class that refuses the T4. Where some classes accept only a few types and ask more of them than the cluster
has (the openb gpuspec33 trace: T4-only tasks ask 1,050 GPUs of its 842 T4s by the time demand reaches capacity),
each share an unconstrained pod takes there is a share a T4-only pod will not find, while the unconstrained pod
could have gone to a type nothing else needs (docs/fgd.md, "Device types in short supply").

:class:`Claims` estimates, from the mix and each type's free share, how much of each type the more constrained
classes will ask for. The mix's demand (weight x devices x share per device) is scaled to the free share of the
cluster (the cluster is assumed to fill), and the *groups* of classes accepting the same types, the group with the
least accepted free share first, each take their demand from their types in proportion to what earlier groups left
(water filling). A pod's *pressure* on a type is the fraction of that type's free share claimed by the groups
before its own group, 0..1. :func:`claimed_penalty` turns it into growth: the pod's share times the pressure of the
type it would take, in the milli the fragmentation growth is counted in, so a pod placed on a fully claimed type
costs as if all it takes became fragments. A mix whose classes all accept the same types claims nothing for any of
them, so the term is 0 there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hami_core.engine.workload import Shape, shape_share
from hami_core.policies.fgd.mix import MixClass

__all__ = ["Claims", "claimed_penalty", "demand"]


def demand(shape: Shape) -> float:
    """The device share (milli) one pod of ``shape`` takes: devices x share per device (at least 1 milli each, so a
    request given in MiB alone still counts)."""
    return shape.nums * max(shape_share(shape), 1.0)


class Claims:
    """One backend's mix over its device types: the accepted-type groups and their demand, built once per mix
    version and type list; :meth:`fill` makes the claims on a given free share.

    :param classes: the backend's classes of the mix (pods without devices are skipped: they take no share).
    :param types: the backend's device types, in the order the free shares are given.
    """

    def __init__(self, classes: Sequence[MixClass], types: Sequence[str]) -> None:
        self.types = tuple(types)
        self._masks: dict[Shape, np.ndarray] = {}
        by_group: dict[bytes, tuple[np.ndarray, float]] = {}
        for shape, weight, _cpu, _mem in classes:
            if shape.deviceless:
                continue
            accepted = self.accepted(shape)
            if accepted.any():
                key = accepted.tobytes()
                old = by_group.get(key, (accepted, 0.0))
                by_group[key] = (accepted, old[1] + weight * demand(shape))
        self.groups = [g for g, _ in by_group.values()]
        self.demand = np.array([d for _, d in by_group.values()])
        #: whether any group accepts fewer types than another: otherwise nothing is ever claimed
        self.constrained = len({g.tobytes() for g in self.groups}) > 1
        self._claims: tuple[bytes, np.ndarray, list[tuple[tuple[float, int, bytes], np.ndarray]]] | None = None

    def accepted(self, shape: Shape) -> np.ndarray:
        """The types ``shape`` accepts, a boolean per type."""
        out = self._masks.get(shape)
        if out is None:
            out = self._masks[shape] = np.array([shape.accepts(t) for t in self.types], dtype=bool)
        return out

    def fill(self, free: np.ndarray) -> list[tuple[tuple[float, int, bytes], np.ndarray]]:
        """The claims on ``free`` (milli per type): per group in claiming order, its key and what the groups up to
        it claimed of each type (cumulative)."""
        free = np.asarray(free, dtype=float)
        token = free.tobytes()
        if self._claims is not None and self._claims[0] == token:
            return self._claims[2]
        total = float(self.demand.sum())
        scale = float(free.sum()) / total if total > 0 else 0.0
        order = sorted(range(len(self.groups)), key=lambda g: _key(self.groups[g], free))
        left = free.copy()
        cumulative = np.zeros(len(self.types))
        out: list[tuple[tuple[float, int, bytes], np.ndarray]] = []
        for g in order:
            sel = self.groups[g]
            room = float(left[sel].sum())
            take = min(float(self.demand[g]) * scale, room)
            if take > 0:
                part = np.where(sel, left * (take / room), 0.0)
                left = left - part
                cumulative = cumulative + part
            out.append((_key(sel, free), cumulative))
        self._claims = (token, free, out)
        return out

    def pressure(self, shape: Shape, free: np.ndarray) -> np.ndarray:
        """Per type, the fraction of its free share claimed by the groups before ``shape``'s own (0..1)."""
        claims = self.fill(free)
        free = np.asarray(free, dtype=float)
        key = _key(self.accepted(shape), free)
        claimed = np.zeros(len(self.types))
        for k, cumulative in claims:  # in key order: the last group before ``key`` holds every earlier claim
            if k >= key:
                break
            claimed = cumulative
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(free > 0, claimed / free, 0.0)
        return np.clip(out, 0.0, 1.0)


def _key(accepted: np.ndarray, free: np.ndarray) -> tuple[float, int, bytes]:
    """A group's claiming order: the least accepted free share first, then the fewest types (deterministic)."""
    return (float(free[accepted].sum()), int(accepted.sum()), accepted.tobytes())


def claimed_penalty(claims: Claims, free: np.ndarray, shapes: Sequence[Shape], type_idx: np.ndarray) -> np.ndarray:
    """Per row of ``type_idx`` (``(rows, devices)``, -1 where a row has no device), the growth (milli) of the pod's
    ``shapes`` taking claimed share: each shape's :func:`demand` times the least pressure among the row's devices
    of a type it accepts (0 on rows with none: the fit refuses them anyway)."""
    total = np.zeros(type_idx.shape[0])
    if not claims.constrained:
        return total
    valid = type_idx >= 0
    idx = np.where(valid, type_idx, 0)
    for shape in shapes:
        if shape.deviceless:
            continue
        p = claims.pressure(shape, free)
        if not p.any():
            continue
        per_type = np.where(claims.accepted(shape), p, np.inf)
        per_device = np.where(valid, per_type[idx], np.inf)
        least = per_device.min(axis=1) if per_device.shape[1] > 1 else per_device[:, 0]
        total += np.where(np.isfinite(least), least, 0.0) * demand(shape)
    return total
