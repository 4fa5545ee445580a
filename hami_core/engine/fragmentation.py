"""Fragmentation of shared devices under a workload mix, vectorised (FGD, Weng et al., USENIX ATC '23).

A device's *free share* is what is left of it in milli (1000 = a whole device): ``1000 x (1 - max(used
cores fraction, used memory fraction))``. For a node and one class ``m`` of the mix: if the node cannot
host ``m`` at all (fewer usable devices than ``m`` asks for, or too little free CPU or memory), every
free share on the node is a fragment; otherwise the fragments are the free shares of the devices ``m``
cannot use (too little memory or cores, no free slot, a type it refuses). The node's fragmentation is
the mix-weighted sum, ``F(n) = sum_m w_m F_m(n)``. FGD places a pod where ``F`` grows least.

"Usable" follows HAMi's standard fit (spec §6.6): a free slot, enough free memory (``memreq`` MiB, or
the percentage of the card) and cores (``min(coresreq, 100)``), an idle card for a whole-card (100-core)
request, and no request without cores on a card whose cores are exhausted.

Everything is numpy over ``(classes, rows, devices)`` at once; absent devices are padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hami_core.engine.workload import Shape
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, DeviceUsage

__all__ = ["FULL", "SELECT_MODES", "DeviceArrays", "Mix", "MixState", "device_growth", "fgd_device_order",
           "fragmentation", "host_growth", "placement_delta"]

FULL = 1000.0
#: How the device for a placement is picked: as the GPU policy's fit would (``binpack``: the busiest
#: usable device, ``spread``: the idlest), or the device that grows fragmentation least (``fgd``).
SELECT_MODES = ("binpack", "spread", "fgd")
_NUMA_SPAN = 1024


@dataclass(slots=True)
class DeviceArrays:
    """One backend's devices on ``rows`` nodes, padded to the widest node."""

    present: np.ndarray  # bool: registered and healthy
    used: np.ndarray
    count: np.ndarray
    usedcores: np.ndarray
    totalcore: np.ndarray
    usedmem: np.ndarray
    totalmem: np.ndarray
    type_idx: np.ndarray  # index into the type list; -1 for padding
    order: np.ndarray  # the fit's tie-break among equal scores: numa, then position (larger wins)
    host: np.ndarray  # (rows, 2): free CPU (milli) and memory (MiB) of the node; inf where unknown

    @classmethod
    def build(cls, per_node: Sequence[Sequence[DeviceUsage]], type_index: Mapping[str, int],
              host: np.ndarray | None = None) -> DeviceArrays:
        rows = len(per_node)
        width = max((len(d) for d in per_node), default=0) or 1
        arr = np.zeros((7, rows, width))
        type_idx = np.full((rows, width), -1, dtype=np.intp)  # -1: the masks' last entry, never accepted
        order = np.zeros((rows, width))
        for r, devs in enumerate(per_node):
            for j, d in enumerate(devs):
                arr[:, r, j] = (d.health, d.used, d.count, d.usedcores, d.totalcore, d.usedmem, d.totalmem)
                type_idx[r, j] = type_index[d.type]
                order[r, j] = (min(max(d.numa, -1), _NUMA_SPAN - 2) + 1) * width + j
        host = np.full((rows, 2), np.inf) if host is None else np.asarray(host, dtype=float).reshape(rows, 2)
        return cls(arr[0] > 0, arr[1], arr[2], arr[3], arr[4], arr[5], arr[6], type_idx, order, host)

    def copy(self) -> DeviceArrays:
        return DeviceArrays(*(np.array(getattr(self, f), copy=True) for f in DeviceArrays.__slots__))

    def free_share(self, usedcores: np.ndarray | None = None, usedmem: np.ndarray | None = None) -> np.ndarray:
        uc = self.usedcores if usedcores is None else usedcores
        um = self.usedmem if usedmem is None else usedmem
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.maximum(np.where(self.totalcore > 0, uc / self.totalcore, 0.0),
                              np.where(self.totalmem > 0, um / self.totalmem, 0.0))
        # rounded so that equal shares compare equal (700 used of 1000 leaves 300, not 300.00000000000006)
        return np.where(self.present, np.round(FULL * (1.0 - np.clip(frac, 0.0, 1.0)), 6), 0.0)


class Mix:
    """The workload classes as arrays, one entry per class, with their type masks over ``types``."""

    def __init__(self, classes: Sequence[tuple[Shape, float, float, float]], types: Sequence[str]) -> None:
        self.shapes = [c[0] for c in classes]
        self.weight = np.array([c[1] for c in classes], dtype=float)
        self.cpu = np.array([c[2] for c in classes], dtype=float)
        self.mem = np.array([c[3] for c in classes], dtype=float)
        self.nums = np.array([s.nums for s in self.shapes], dtype=float)
        self.types = list(types)
        self.spec = _Spec.of(self.shapes, self.types)

    def __len__(self) -> int:
        return len(self.shapes)


@dataclass(slots=True)
class _Spec:
    """Per-device demand of a batch of shapes, shaped ``(k, 1, 1)`` to broadcast over ``(rows, devices)``."""

    cores: np.ndarray
    memreq: np.ndarray
    pct: np.ndarray  # -1 where not given
    type_ok: np.ndarray | None  # (k, types + 1): accepted types, padding last (never accepted)

    @classmethod
    def of(cls, shapes: Sequence[Shape], types: Sequence[str]) -> _Spec:
        def col(values: list[float]) -> np.ndarray:
            return np.array(values, dtype=float).reshape(-1, 1, 1)

        cores = col([min(s.cores, 100) for s in shapes])
        memreq = col([s.memreq for s in shapes])
        pct = col([s.mem_percentage if s.mem_percentage != MEM_PERCENTAGE_UNSET and s.memreq <= 0 else -1
                   for s in shapes])
        type_ok = None
        if any(s.use_types or s.nouse_types for s in shapes):
            type_ok = np.array([[s.accepts(t) for t in types] + [False] for s in shapes], dtype=bool)
        return cls(cores, memreq, pct, type_ok)

    def need(self, totalmem: np.ndarray) -> np.ndarray:
        """``(k, rows, devices)``: MiB each shape books on each device (``memreq``, else its percentage)."""
        return np.where(self.memreq > 0, self.memreq,
                        np.where(self.pct >= 0, np.floor(totalmem * np.maximum(self.pct, 0) / 100), 0.0))

    def usable(self, dev: DeviceArrays, used: np.ndarray, usedcores: np.ndarray, usedmem: np.ndarray) -> np.ndarray:
        """``(k, rows, devices)``: which devices each shape could take, on the given usage."""
        ok = dev.present & (used < dev.count) & (dev.totalmem - usedmem >= self.need(dev.totalmem))
        ok = ok & (dev.totalcore - usedcores >= self.cores)
        busy_whole = (dev.totalcore == 100) & (used > 0)
        exhausted = (dev.totalcore != 0) & (usedcores >= dev.totalcore)
        ok &= ~((self.cores >= 100) & busy_whole) & ~((self.cores == 0) & exhausted)
        if self.type_ok is not None:
            ok &= self.type_ok[:, dev.type_idx]
        return ok


@dataclass(slots=True)
class MixState:
    """What the mix can use on each row before any placement: ``(classes, rows)`` arrays.

    ``n_ok``: usable devices per class; ``strand``: free share on devices the class cannot use; ``frag``:
    the class's fragments (``strand``, or all free share where the class cannot run); ``total``: each
    row's free share.
    """

    n_ok: np.ndarray
    strand: np.ndarray
    frag: np.ndarray
    total: np.ndarray

    @classmethod
    def of(cls, dev: DeviceArrays, mix: Mix) -> MixState:
        share = dev.free_share()
        total = share.sum(axis=1)
        ok = mix.spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (C, R, G)
        n_ok = ok.sum(axis=2).astype(float)
        strand = np.where(ok, 0.0, share).sum(axis=2)
        fits = (n_ok >= mix.nums[:, None]) & _host_fits(dev.host, mix)
        return cls(n_ok, strand, np.where(fits, strand, total), total)

    def take(self, rows: np.ndarray) -> MixState:
        return MixState(self.n_ok[:, rows], self.strand[:, rows], self.frag[:, rows], self.total[rows])


def fragmentation(dev: DeviceArrays, mix: Mix) -> np.ndarray:
    """Expected fragmentation of each row (free share the mix cannot use), in milli."""
    if not len(mix):
        return np.zeros(len(dev.present))
    return mix.weight @ MixState.of(dev, mix).frag


def host_growth(state: MixState, host_free: np.ndarray, host_need: tuple[float, float], mix: Mix) -> np.ndarray:
    """Growth of each row's fragmentation if a pod without devices takes ``host_need`` CPU and memory there."""
    if not len(mix):
        return np.zeros(len(host_free))
    fits = (state.n_ok >= mix.nums[:, None]) & _host_fits(host_free - np.asarray(host_need, dtype=float), mix)
    return np.round(mix.weight @ (np.where(fits, state.strand, state.total) - state.frag), 6)


def _host_fits(host: np.ndarray, mix: Mix) -> np.ndarray:
    """``(C, rows)``: whether each class's CPU and memory fit in each row's free host resources."""
    return (host[None, :, 0] >= mix.cpu[:, None]) & (host[None, :, 1] >= mix.mem[:, None])


def device_growth(dev: DeviceArrays, request: Shape, mix: Mix, host_after: np.ndarray | None = None, *,
                  state: MixState | None = None, columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Growth of each row's fragmentation if one device of ``request`` goes to device ``j``: ``(rows, devices)``.

    Also returns which devices could take it. ``host_after`` is the rows' free CPU and memory once the
    pod is there (default: unchanged); ``state`` the rows' :class:`MixState` if already known. With
    ``columns`` (one device per row) only that device is evaluated: the result is ``(rows, 1)``.
    """
    spec = _Spec.of([request], mix.types)
    inc = spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)[0]
    if not len(mix):
        return np.zeros(inc.shape if columns is None else (len(inc), 1)), inc
    state = MixState.of(dev, mix) if state is None else state
    host_after = dev.host if host_after is None else host_after
    if columns is not None:
        rows = np.arange(len(inc))
        dev = DeviceArrays(*(a[rows, columns][:, None] if a.ndim == 2 and f != "host" else a
                             for f, a in ((f, getattr(dev, f)) for f in DeviceArrays.__slots__)))
    need = spec.need(dev.totalmem)[0]
    cores = float(spec.cores[0, 0, 0])
    post_used, post_cores, post_mem = dev.used + 1, dev.usedcores + cores, dev.usedmem + need
    share = dev.free_share()
    post_share = dev.free_share(post_cores, post_mem)
    u = mix.spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (C, R, G): the devices it would take
    u2 = mix.spec.usable(dev, post_used, post_cores, post_mem)  # ... as if each had taken the request
    n2 = state.n_ok[:, :, None] - u + u2
    s2 = state.strand[:, :, None] - np.where(u, 0.0, share) + np.where(u2, 0.0, post_share)
    t2 = state.total[:, None] - share + post_share  # (R, G)
    after = np.where((n2 >= mix.nums[:, None, None]) & _host_fits(host_after, mix)[:, :, None], s2, t2)
    delta = np.tensordot(mix.weight, after - state.frag[:, :, None], axes=1)
    return np.round(delta, 6), inc


def device_scores(dev: DeviceArrays, weights: tuple[int, int, int]) -> np.ndarray:
    """HAMi's device score (spec §7.1) of every device, before the request."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 10.0 * (weights[0] * np.where(dev.count > 0, dev.used / dev.count, 0.0)
                       + weights[1] * np.where(dev.totalcore > 0, dev.usedcores / dev.totalcore, 0.0)
                       + weights[2] * np.where(dev.totalmem > 0, dev.usedmem / dev.totalmem, 0.0))


def placement_delta(dev: DeviceArrays, request: Shape, mix: Mix, *, select: str = "binpack",
                    weights: tuple[int, int, int] = (1, 1, 1), host_need: tuple[float, float] = (0.0, 0.0),
                    state: MixState | None = None) -> np.ndarray:
    """Growth of each row's fragmentation if ``request`` is placed there (``inf`` where it cannot be).

    The request's devices are picked one at a time as ``select`` says (see :data:`SELECT_MODES`); each
    pick changes the row before the next, as the fit does. ``host_need`` is the pod's CPU and memory,
    taken from the node with the first device. ``state``: the rows' :class:`MixState`, if known.
    """
    if select not in SELECT_MODES:
        raise ValueError(f"select must be one of {SELECT_MODES}, got {select!r}")
    rows = np.arange(len(dev.present))
    total = np.zeros(len(rows))
    alive = np.ones(len(rows), dtype=bool)
    cores = min(request.cores, 100)
    host_after = dev.host - np.asarray(host_need, dtype=float)
    spec = _Spec.of([request], mix.types)
    for step in range(request.nums):
        if step:
            state = MixState.of(dev, mix) if len(mix) else None
        if select == "fgd":
            delta, inc = device_growth(dev, request, mix, host_after, state=state)
            pick = np.argmax(_selection_key(dev, inc, delta, select, weights), axis=1)
            chosen = delta[rows, pick]
        else:  # the device does not depend on the growth: evaluate only the one the fit would take
            inc = spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)[0]
            pick = np.argmax(_selection_key(dev, inc, None, select, weights), axis=1)
            chosen = device_growth(dev, request, mix, host_after, state=state, columns=pick)[0][:, 0]
        alive &= inc[rows, pick]
        total += np.where(alive, chosen, 0.0)
        if step + 1 < request.nums:
            dev = dev.copy() if step == 0 else dev
            dev.host = host_after
            dev.used[rows, pick] += 1
            dev.usedcores[rows, pick] += cores
            dev.usedmem[rows, pick] += spec.need(dev.totalmem)[0][rows, pick]
    alive &= (host_after[:, 0] >= 0) & (host_after[:, 1] >= 0)
    return np.where(alive, np.round(total, 6), np.inf)


def _selection_key(dev: DeviceArrays, inc: np.ndarray, delta: np.ndarray | None, select: str,
                   weights: tuple[int, int, int]) -> np.ndarray:
    """Larger is preferred; ``-inf`` where the device cannot take the request."""
    primary = np.round(device_scores(dev, weights) * 1e6)
    if select == "spread":
        primary = -primary
    key = primary * (_NUMA_SPAN * inc.shape[1]) + dev.order
    if select == "fgd" and delta is not None:  # least growth first, then as binpack
        rank = np.argsort(np.argsort(key, axis=1), axis=1)
        key = -delta * (inc.shape[1] + 1) * 1e6 + rank
    return np.where(inc, key, -np.inf)


def fgd_device_order(devices: Sequence[DeviceUsage], request: Shape,
                     classes: Sequence[tuple[Shape, float, float, float]], host_free: tuple[float, float],
                     host_need: tuple[float, float], weights: tuple[int, int, int] = (1, 1, 1)) -> list[DeviceUsage]:
    """``devices`` ordered for the fit (preferred **last**): most fragmentation growth first, least last;
    equal growth in binpack order. Devices that cannot take the request keep their place at the front."""
    if not devices:
        return list(devices)
    types = sorted({d.type for d in devices})
    free = np.array([host_free], dtype=float)
    dev = DeviceArrays.build([devices], {t: i for i, t in enumerate(types)}, free)
    delta, inc = device_growth(dev, request, Mix(classes, types), free - np.asarray(host_need, float))
    key = _selection_key(dev, inc, delta, "fgd", weights)[0, :len(devices)]
    return [devices[i] for i in np.argsort(key, kind="stable")]
