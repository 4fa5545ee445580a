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

import bisect
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hami_core.engine.workload import Shape
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, DeviceUsage

__all__ = ["FULL", "SELECT_MODES", "WEIGHT_FREE_SELECTS", "DeviceArrays", "FitRanks", "Mix", "MixState", "class_deltas",
           "column_deltas", "device_growth", "fgd_device_order", "fragmentation", "free_share_of", "host_class_deltas",
           "host_growth", "order_by_growth", "order_without_choice", "placement_delta", "spec_of", "usable_devices"]

FULL = 1000.0
#: How the device for a placement is picked: as the GPU policy's fit would (``binpack``: the busiest
#: usable device, ``spread``: the idlest), or the device that grows fragmentation least (``fgd``).
SELECT_MODES = ("binpack", "spread", "fgd")
#: The modes whose device choice does not depend on the mix (see :func:`class_deltas`).
WEIGHT_FREE_SELECTS = ("binpack", "spread")
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

    def take(self, rows: np.ndarray) -> DeviceArrays:
        return DeviceArrays(*(getattr(self, f)[rows] for f in DeviceArrays.__slots__))

    def copy(self) -> DeviceArrays:
        return DeviceArrays(*(np.array(getattr(self, f), copy=True) for f in DeviceArrays.__slots__))

    def free_share(self, usedcores: np.ndarray | None = None, usedmem: np.ndarray | None = None) -> np.ndarray:
        return free_share_of(self.present, self.usedcores if usedcores is None else usedcores, self.totalcore,
                             self.usedmem if usedmem is None else usedmem, self.totalmem)


def free_share_of(present: np.ndarray, usedcores: np.ndarray, totalcore: np.ndarray, usedmem: np.ndarray,
                  totalmem: np.ndarray) -> np.ndarray:
    """Each device's free share (milli): ``FULL x (1 - max(used cores, used memory fraction))``, 0 where absent."""
    # np.divide's ``where`` in place of an errstate block: the same quotients, without the context's cost (this runs
    # for every changed node)
    fc = np.divide(usedcores, totalcore, out=np.zeros(np.broadcast_shapes(np.shape(usedcores), np.shape(totalcore))),
                   where=totalcore > 0)
    fm = np.divide(usedmem, totalmem, out=np.zeros(np.broadcast_shapes(np.shape(usedmem), np.shape(totalmem))),
                   where=totalmem > 0)
    frac = np.minimum(np.maximum(np.maximum(fc, fm), 0.0), 1.0)
    # rounded so that equal shares compare equal (700 used of 1000 leaves 300, not 300.00000000000006)
    return np.where(present, (FULL * (1.0 - frac)).round(6), 0.0)


class Mix:
    """The workload classes as arrays, one entry per class, with their type masks over ``types``.

    Classes that book the same on one device (cores, memory) share a *base*: which devices such a class
    could use is computed once per base (``base_spec``) and narrowed per class by its type mask
    (``type_ok``). A mix where model constraints split one request shape into many classes (the openb
    gpuspec33 trace: ~100 classes, 15 bases) so costs ``bases x devices``, not ``classes x devices``.
    """

    def __init__(self, classes: Sequence[tuple[Shape, float, float, float]], types: Sequence[str]) -> None:
        self.classes = tuple(classes)
        #: What each class is, apart from its weight: (shape, CPU, memory). Per-row figures of a class depend on
        #: these alone, so they stay valid across mix versions that only move the weights.
        self.keys = tuple((c[0], c[2], c[3]) for c in self.classes)
        self.shapes = [c[0] for c in classes]
        self.weight = np.array([c[1] for c in classes], dtype=float)
        self.cpu = np.array([c[2] for c in classes], dtype=float)
        self.mem = np.array([c[3] for c in classes], dtype=float)
        self.nums = np.array([s.nums for s in self.shapes], dtype=float)
        self.types = list(types)
        #: For a :meth:`subset`: the parent mix's base of each of this mix's bases.
        self.parent_bases: np.ndarray | None = None
        bases: dict[tuple[int, int, int], int] = {}
        self.base = np.array([bases.setdefault(_base_key(s), len(bases)) for s in self.shapes], dtype=np.intp)
        #: What each base books on one device (:func:`_base_key`), in base order.
        self.base_keys = list(bases)
        self.base_spec = _Spec.of([Shape("", 1, c, m, p) for c, m, p in bases], ())
        #: ``(classes, types + 1)``: the types each class accepts, padding last (never); None: all accept.
        self.type_ok: np.ndarray | None = None
        self._groups: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._fit_ranks: FitRanks | None = None
        if any(s.use_types or s.nouse_types or s.deviceless for s in self.shapes):
            self.type_ok = np.array([[s.accepts(t) for t in self.types] + [False] for s in self.shapes], dtype=bool)

    def __len__(self) -> int:
        return len(self.shapes)


    def subset(self, classes: Sequence[int]) -> Mix:
        """The mix of only ``classes`` (indices), over the same types; ``parent_bases`` maps its bases to this
        mix's (see :meth:`RowStore.sub_state <hami_core.policies.fgd.rowstore.RowStore.sub_state>`)."""
        sub = Mix([self.classes[i] for i in classes], self.types)
        first = {int(b): int(self.base[i]) for i, b in zip(reversed(list(classes)), reversed(sub.base.tolist()),
                                                           strict=True)}
        sub.parent_bases = np.array([first[b] for b in range(len(first))], dtype=np.intp)
        return sub

    def usable(self, dev: DeviceArrays, used: np.ndarray, usedcores: np.ndarray, usedmem: np.ndarray) -> np.ndarray:
        """``(classes, rows, devices)``: which devices each class could take, on the given usage."""
        ok = self.base_spec.usable(dev, used, usedcores, usedmem)[self.base]
        if self.type_ok is not None:
            ok &= self.type_ok[:, dev.type_idx]
        return ok

    def counts(self, dev: DeviceArrays, share: np.ndarray, total: np.ndarray) -> _Counts:
        """Each class's usable devices and the free share on the devices it cannot use, per row.

        Per base over the devices, then per class by row: on a row whose devices all have one type
        (every openb node) a class takes its base's figures or, refusing the type, none of them. Rows
        mixing types are counted device by device. The sums run in the same order as a per-class count,
        so the figures are identical.
        """
        ub = self.base_spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (B, R, G)
        n_base = ub.sum(axis=2).astype(float)
        s_base = np.where(ub, 0.0, share).sum(axis=2)
        n, strand = n_base[self.base], s_base[self.base]
        row_type, mixed = _row_types(dev)
        if self.type_ok is None:
            return _Counts(n, strand, n_base, s_base, row_type, mixed)
        accept = self.type_ok[:, row_type]
        n = np.where(accept, n, 0.0)
        strand = np.where(accept, strand, total)
        if mixed.any():
            rows = np.flatnonzero(mixed)
            ok = ub[:, rows][self.base] & self.type_ok[:, dev.type_idx[rows]]
            n[:, rows] = ok.sum(axis=2)
            strand[:, rows] = np.where(ok, 0.0, share[rows]).sum(axis=2)
        return _Counts(n, strand, n_base, s_base, row_type, mixed)

    def accepts(self, row_type: np.ndarray) -> np.ndarray:
        """``(classes, rows)``: whether each class accepts each row's (single) device type."""
        if self.type_ok is None:
            return np.ones((len(self), len(row_type)), dtype=bool)
        return self.type_ok[:, row_type]

    @property
    def fit_ranks(self) -> FitRanks:
        """Where free CPU and memory rank among the classes' figures (:class:`FitRanks`), built once."""
        if self._fit_ranks is None:
            self._fit_ranks = FitRanks(self.cpu, self.mem)
        return self._fit_ranks

    @property
    def groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Classes grouped by base and device count: ``(membership (groups, classes), base of each group,
        device count of each group)``. Classes of one group fit on a device set exactly when the others do."""
        if self._groups is None:
            keys: dict[tuple[int, float], int] = {}
            pairs = zip(self.base.tolist(), self.nums.tolist(), strict=True)
            of_class = [keys.setdefault((b, n), len(keys)) for b, n in pairs]
            member = np.zeros((len(keys), len(self)))
            member[of_class, np.arange(len(self))] = 1.0
            self._groups = (member, np.array([k[0] for k in keys], dtype=np.intp),
                            np.array([k[1] for k in keys], dtype=float))
        return self._groups


class FitRanks:
    """Where a node's free CPU and memory rank among a mix's classes' CPU and memory: how many of the sorted distinct
    figures are at or below the free one. A class fits where both of its figures are at or below the free ones
    (:func:`_host_fits`), so equal rank pairs mean the same classes fit. A pair is packed into one integer,
    :attr:`bits` wide (the CPU rank in the low :attr:`cpu_bits`)."""

    __slots__ = ("bits", "cpu", "cpu_bits", "cpu_list", "mem", "mem_list")

    def __init__(self, cpu: np.ndarray, mem: np.ndarray) -> None:
        self.cpu, self.mem = np.unique(cpu), np.unique(mem)
        self.cpu_list, self.mem_list = self.cpu.tolist(), self.mem.tolist()  # for one node's pair, in plain Python
        self.cpu_bits = len(self.cpu).bit_length()  # a rank is 0..len
        self.bits = self.cpu_bits + len(self.mem).bit_length()

    def ranks(self, free: np.ndarray) -> np.ndarray:
        """``(rows,)`` int64: each row's packed rank pair of ``free``, ``(rows, 2)`` CPU and memory."""
        return (np.searchsorted(self.cpu, free[:, 0], side="right")
                | np.searchsorted(self.mem, free[:, 1], side="right") << self.cpu_bits)

    def rank(self, cpu: float, mem: float) -> int:
        """:meth:`ranks` of one node (``bisect_right`` is ``searchsorted(side="right")``)."""
        return bisect.bisect_right(self.cpu_list, cpu) | bisect.bisect_right(self.mem_list, mem) << self.cpu_bits


@dataclass(slots=True)
class _Counts:
    n: np.ndarray  # (C, R) usable devices per class
    strand: np.ndarray  # (C, R) free share on devices the class cannot use
    n_base: np.ndarray  # (B, R) the same per base, for rows of one type (ignoring type masks)
    s_base: np.ndarray
    row_type: np.ndarray  # (R,) each row's device type (-1: no device)
    mixed: np.ndarray  # (R,) rows whose devices have several types


def _base_key(shape: Shape) -> tuple[int, int, int]:
    """What a class books on one device: cores, MiB, percentage of the card (-1: not given)."""
    pct = shape.mem_percentage if shape.mem_percentage != MEM_PERCENTAGE_UNSET and shape.memreq <= 0 else -1
    return min(shape.cores, 100), shape.memreq, pct


def _row_types(dev: DeviceArrays) -> tuple[np.ndarray, np.ndarray]:
    """Each row's device type (of its first present device; -1 without any), and which rows mix types."""
    first = np.argmax(dev.present, axis=1)
    row_type = np.where(dev.present.any(axis=1), dev.type_idx[np.arange(len(first)), first], -1)
    mixed = (dev.present & (dev.type_idx != row_type[:, None])).any(axis=1)
    return row_type, mixed


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
        pct = col([_base_key(s)[2] for s in shapes])
        type_ok = None
        if any(s.use_types or s.nouse_types for s in shapes):
            type_ok = np.array([[s.accepts(t) for t in types] + [False] for s in shapes], dtype=bool)
        return cls(cores, memreq, pct, type_ok)

    def need(self, totalmem: np.ndarray) -> np.ndarray:
        """``(k, rows, devices)``: MiB each shape books on each device (``memreq``, else its percentage)."""
        return np.where(self.memreq > 0, self.memreq,
                        np.where(self.pct >= 0, np.floor(totalmem * np.maximum(self.pct, 0) / 100), 0.0))

    def usable(self, dev: DeviceArrays, used: np.ndarray, usedcores: np.ndarray, usedmem: np.ndarray,
               need: np.ndarray | None = None) -> np.ndarray:
        """``(k, rows, devices)``: which devices each shape could take, on the given usage (``need``:
        :meth:`need` of ``dev.totalmem``, when the caller has it)."""
        ok = dev.present & (used < dev.count) & (dev.totalmem - usedmem >= (
            self.need(dev.totalmem) if need is None else need))
        ok = ok & (dev.totalcore - usedcores >= self.cores)
        busy_whole = (dev.totalcore == 100) & (used > 0)
        exhausted = (dev.totalcore != 0) & (usedcores >= dev.totalcore)
        ok &= ~((self.cores >= 100) & busy_whole) & ~((self.cores == 0) & exhausted)
        if self.type_ok is not None:
            ok &= self.type_ok[:, dev.type_idx]
        return ok


@dataclass(slots=True)
class MixState:
    """What the mix can use on each row before any placement.

    Per class, ``(classes, rows)``: ``n_ok``, the usable devices; ``strand``, the free share on devices the
    class cannot use; ``frag``, the class's fragments (``strand``, or all free share where the class
    cannot run). Per row: ``total``, the free share; ``weighted``, the row's fragmentation (``weight @
    frag``); ``row_type`` and ``mixed`` (see :func:`_row_types`). Per base, ``(bases, rows)``: ``n_base``
    and ``s_base``, the class figures before type masks (valid on rows of one type).
    """

    n_ok: np.ndarray
    strand: np.ndarray
    frag: np.ndarray
    total: np.ndarray
    weighted: np.ndarray
    n_base: np.ndarray
    s_base: np.ndarray
    row_type: np.ndarray
    mixed: np.ndarray

    @classmethod
    def of(cls, dev: DeviceArrays, mix: Mix, spread: np.ndarray | None = None,
           host: np.ndarray | None = None) -> MixState:
        """The state of ``dev``'s rows; with ``spread``, of rows whose devices are ``dev``'s rows ``spread`` (rows in
        one device state computed once) and whose free CPU and memory are ``host``."""
        share = dev.free_share()
        total = share.sum(axis=1)
        c = mix.counts(dev, share, total)
        n, strand, n_base, s_base, row_type, mixed = c.n, c.strand, c.n_base, c.s_base, c.row_type, c.mixed
        if spread is not None:
            n, strand, total, n_base, s_base = n[:, spread], strand[:, spread], total[spread], n_base[:, spread], \
                s_base[:, spread]
            row_type, mixed = row_type[spread], mixed[spread]
        fits = (n >= mix.nums[:, None]) & _host_fits(dev.host if host is None else host, mix)
        frag = np.where(fits, strand, total)
        return cls(n, strand, frag, total, mix.weight @ frag, n_base, s_base, row_type, mixed)

    def take(self, rows: np.ndarray) -> MixState:
        # np.take along an axis gathers several times faster than fancy indexing ``a[:, rows]``
        return MixState(*(np.take(getattr(self, f), rows, axis=getattr(self, f).ndim - 1)
                          for f in MixState.__slots__))


def fragmentation(dev: DeviceArrays, mix: Mix) -> np.ndarray:
    """Expected fragmentation of each row (free share the mix cannot use), in milli."""
    if not len(mix):
        return np.zeros(len(dev.present))
    return MixState.of(dev, mix).weighted


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
    ``columns`` (one device per row) only that device is evaluated: both results are ``(rows, 1)``.
    """
    spec = spec_of(request, tuple(mix.types))
    if len(mix) and state is None:
        state = MixState.of(dev, mix)
    if columns is not None:
        dev = _column(dev, columns)
    inc = spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)[0]
    if state is None:  # no mix: nothing to fragment
        return np.zeros(inc.shape), inc
    host_after = dev.host if host_after is None else host_after
    need = spec.need(dev.totalmem)[0]
    post = _Post(dev, need, float(spec.cores[0, 0, 0]))
    delta = _growth_by_base(dev, post, mix, state, host_after)
    if state.mixed.any():  # rows mixing device types: class by class
        rows = np.flatnonzero(state.mixed)
        delta[rows] = _growth_by_class(dev.take(rows), post.take(rows), mix, state.take(rows), host_after[rows])
    return np.round(delta, 6), inc


def _column(dev: DeviceArrays, columns: np.ndarray) -> DeviceArrays:
    """Each row's device ``columns[row]`` alone, as ``(rows, 1)`` arrays (the host figures unchanged)."""
    rows = np.arange(len(dev.present))
    return DeviceArrays(*(a[rows, columns][:, None] if a.ndim == 2 and f != "host" else a
                          for f, a in ((f, getattr(dev, f)) for f in DeviceArrays.__slots__)))


@dataclass(slots=True)
class _Post:
    """Each device's usage and free share before and after taking one device of the request."""

    used: np.ndarray
    cores: np.ndarray
    mem: np.ndarray
    share: np.ndarray
    post_share: np.ndarray

    def __init__(self, dev: DeviceArrays | None, need: np.ndarray | None = None, cores: float = 0.0) -> None:
        if dev is None or need is None:
            return
        self.used, self.cores, self.mem = dev.used + 1, dev.usedcores + cores, dev.usedmem + need
        self.share = dev.free_share()
        self.post_share = dev.free_share(self.cores, self.mem)

    def take(self, rows: np.ndarray) -> _Post:
        out = _Post(None)
        for f in _Post.__slots__:
            setattr(out, f, getattr(self, f)[rows])
        return out


def _growth_by_class(dev: DeviceArrays, post: _Post, mix: Mix, state: MixState, host_after: np.ndarray) -> np.ndarray:
    """The growth, ``sum_c w_c (after_c - frag_c)``, class by class over ``(classes, rows, devices)``.

    The definition, used on rows mixing device types; :func:`_growth_by_base` gives the same figures on
    rows of one type at the cost of the bases."""
    return np.tensordot(mix.weight, _deltas_by_class(dev, post, mix, state, host_after), axes=1)


def _deltas_by_class(dev: DeviceArrays, post: _Post, mix: Mix, state: MixState, host_after: np.ndarray) -> np.ndarray:
    """``after_c - frag_c`` of every class, row and device, ``(classes, rows, devices)`` (unweighted)."""
    u = mix.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (C, R, G): the devices it would take
    u2 = mix.usable(dev, post.used, post.cores, post.mem)  # ... as if each had taken the request
    n2 = state.n_ok[:, :, None] - u + u2
    s2 = state.strand[:, :, None] - np.where(u, 0.0, post.share) + np.where(u2, 0.0, post.post_share)
    t2 = state.total[:, None] - post.share + post.post_share  # (R, G)
    after = np.where((n2 >= mix.nums[:, None, None]) & _host_fits(host_after, mix)[:, :, None], s2, t2)
    return after - state.frag[:, :, None]


def _growth_by_base(dev: DeviceArrays, post: _Post, mix: Mix, state: MixState, host_after: np.ndarray) -> np.ndarray:
    """The growth on rows whose devices have one type, per base instead of per class.

    There a class refusing the row's type can use nothing before or after (its fragments are the free
    share, ``after - frag = t2 - total``), and a class accepting it uses what its base uses. So
    ``sum_c w_c after_c = W t2 + sum_g Y_g [n2_g >= k_g] (s2_g - t2)`` over groups ``g`` of classes with
    one base and device count ``k_g``, where ``Y_g`` sums the weights of the group's classes that accept the
    row and whose CPU and memory fit after the placement; ``sum_c w_c frag_c`` is the state's ``weighted``.
    Costs ``classes x rows + groups x rows x devices`` instead of ``classes x rows x devices``.
    """
    ub = mix.base_spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (B, R, G)
    ub2 = mix.base_spec.usable(dev, post.used, post.cores, post.mem)
    n2 = state.n_base[:, :, None] - ub + ub2
    s2 = state.s_base[:, :, None] - np.where(ub, 0.0, post.share) + np.where(ub2, 0.0, post.post_share)
    t2 = state.total[:, None] - post.share + post.post_share  # (R, G)
    member, group_base, group_nums = mix.groups
    y = (member * mix.weight) @ (mix.accepts(state.row_type) & _host_fits(host_after, mix))  # (groups, R)
    fits = n2[group_base] >= group_nums[:, None, None]  # (groups, R, G)
    gain = np.einsum("gr,grj->rj", y, np.where(fits, s2[group_base] - t2, 0.0))
    return mix.weight.sum() * t2 + gain - state.weighted[:, None]


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
            dev = _book_step(dev, rows, pick, host_after, cores, spec, copy=step == 0)
    alive &= (host_after[:, 0] >= 0) & (host_after[:, 1] >= 0)
    return np.where(alive, np.round(total, 6), np.inf)


def _book_step(dev: DeviceArrays, rows: np.ndarray, pick: np.ndarray, host_after: np.ndarray, cores: float,
               spec: _Spec, *, copy: bool) -> DeviceArrays:
    """Each row after one device of a multi-device request was taken there (``pick``), as the fit books it before
    choosing the next; ``copy`` first when ``dev`` is the caller's."""
    dev = dev.copy() if copy else dev
    dev.host = host_after
    dev.used[rows, pick] += 1
    dev.usedcores[rows, pick] += cores
    dev.usedmem[rows, pick] += spec.need(dev.totalmem)[0][rows, pick]
    return dev


def class_deltas(dev: DeviceArrays, request: Shape, mix: Mix, *, select: str = "binpack",
                 weights: tuple[int, int, int] = (1, 1, 1), host_need: tuple[float, float] = (0.0, 0.0),
                 state: MixState | None = None, picks: np.ndarray | None = None,
                 column: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class, how each row's fragments grow if ``request`` is placed there, unweighted: ``(classes, rows)``;
    and which rows can take it, ``(rows,)`` (their deltas are 0 elsewhere).

    Only for device choices that do not depend on the mix (:data:`WEIGHT_FREE_SELECTS`): the devices, and so
    every class's delta, are then the same under any weights, and :func:`placement_delta` is ``mix.weight @
    deltas`` (``inf`` where the row cannot take it; equal up to the order of the floating-point sums, which the
    rounding to 1e-6 milli absorbs). A cache can keep the deltas and re-weight them when the mix's weights
    move, and compute only classes new to the mix (the deltas of a class do not depend on the other classes).
    ``state``: the rows' :class:`MixState` under ``mix``, if known.

    Also returns the device each step took on each row, ``(request.nums, rows)``: they do not depend on the mix,
    so a caller computing more classes on the same rows later passes them back as ``picks`` and skips the
    choice (the rows must be unchanged); the returned ``alive`` is then all true (the caller has it). With
    ``column`` (a dict), the first step's per-base figures are put there (see :func:`column_deltas`).
    """
    if select not in WEIGHT_FREE_SELECTS:
        raise ValueError(f"select must be one of {WEIGHT_FREE_SELECTS}, got {select!r}")
    rows = np.arange(len(dev.present))
    deltas = np.zeros((len(mix), len(rows)))
    alive = np.ones(len(rows), dtype=bool)
    cores = min(request.cores, 100)
    host_after = dev.host - np.asarray(host_need, dtype=float)
    spec = _Spec.of([request], mix.types)
    chosen = np.zeros((request.nums, len(rows)), dtype=np.intp) if picks is None else picks
    for step in range(request.nums):
        if picks is None:
            inc = spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)[0]
            chosen[step] = pick = np.argmax(_selection_key(dev, inc, None, select, weights), axis=1)
            alive &= inc[rows, pick]
        else:
            pick = picks[step]
        if len(mix):
            if step or state is None:  # each pick changes the row before the next, as the fit does
                state = MixState.of(dev, mix)
            col = _column(dev, pick)
            post = _Post(col, spec.need(col.totalmem)[0], float(cores))
            step_deltas = _deltas_at_column(col, post, mix, state, host_after, column if step == 0 else None)
            deltas += np.where(alive, step_deltas, 0.0)
        if step + 1 < request.nums:
            dev = _book_step(dev, rows, pick, host_after, cores, spec, copy=step == 0)
    if picks is None:
        alive &= (host_after[:, 0] >= 0) & (host_after[:, 1] >= 0)
    return deltas, alive, chosen


def _deltas_at_column(dev: DeviceArrays, post: _Post, mix: Mix, state: MixState, host_after: np.ndarray,
                      column: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """``after_c - frag_c`` per class and row when each row's one device (``dev`` has one column) takes the request.

    Rows of one device type go through the bases (:func:`column_deltas`); rows mixing types are counted class by
    class. ``column``: receives the per-base figures."""
    ub = mix.base_spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)[:, :, 0]  # (B, R)
    ub2 = mix.base_spec.usable(dev, post.used, post.cores, post.mem)[:, :, 0]
    share, post_share = post.share[:, 0], post.post_share[:, 0]
    n2 = state.n_base - ub + ub2
    s2 = state.s_base - np.where(ub, 0.0, share) + np.where(ub2, 0.0, post_share)
    t2 = state.total - share + post_share
    if column is not None:
        column.update(n2=n2, s2=s2, t2=t2)
    out = column_deltas(mix, n2, s2, t2, state.frag, state.row_type, host_after)
    if state.mixed.any():
        rows = np.flatnonzero(state.mixed)
        by_class = _deltas_by_class(dev.take(rows), post.take(rows), mix, state.take(rows), host_after[rows])
        out[:, rows] = by_class[:, :, 0]
    return out


def column_deltas(mix: Mix, n2: np.ndarray, s2: np.ndarray, t2: np.ndarray, frag: np.ndarray, row_type: np.ndarray,
                  host_after: np.ndarray) -> np.ndarray:
    """``after_c - frag_c`` per class and row, on rows of one device type, from the per-base figures after one device
    of a request went to each row's chosen device: ``n2``/``s2`` ``(bases, rows)``, each base's usable devices and
    strand after; ``t2`` ``(rows,)``, the free share after; ``frag`` and ``row_type`` as in :class:`MixState`.

    As :func:`_growth_by_base`: a class refusing the row's type has ``after = t2``; one accepting it its base's
    strand where its base still finds enough devices and its CPU and memory fit, else ``t2``. The per-base figures
    do not depend on the classes, so a cache that keeps them computes a class new to the mix from them alone."""
    fits = mix.accepts(row_type) & _host_fits(host_after, mix) & (n2[mix.base] >= mix.nums[:, None])
    return np.where(fits, s2[mix.base], t2) - frag


def host_class_deltas(state: MixState, host_free: np.ndarray, host_need: tuple[float, float], mix: Mix) -> np.ndarray:
    """Per class, how each row's fragments grow if a pod without devices takes ``host_need`` CPU and memory there,
    ``(classes, rows)``, unweighted: :func:`host_growth` is ``mix.weight @`` these."""
    fits = (state.n_ok >= mix.nums[:, None]) & _host_fits(host_free - np.asarray(host_need, dtype=float), mix)
    return np.where(fits, state.strand, state.total) - state.frag


def _selection_key(dev: DeviceArrays, inc: np.ndarray, delta: np.ndarray | None, select: str,
                   weights: tuple[int, int, int]) -> np.ndarray:
    """Larger is preferred; ``-inf`` where the device cannot take the request."""
    if select == "fgd" and delta is not None:  # least growth first, then as binpack
        key = -delta * (inc.shape[1] + 1) * 1e6 + _selection_rank(dev, inc, weights)
    else:
        key = _binpack_key(dev, inc, weights, spread=select == "spread")
    return np.where(inc, key, -np.inf)


def _binpack_key(dev: DeviceArrays, inc: np.ndarray, weights: tuple[int, int, int], *, spread: bool = False
                 ) -> np.ndarray:
    """The fit's preference among a row's devices before the request (larger preferred): HAMi's device score, then
    numa and position."""
    primary = np.round(device_scores(dev, weights) * 1e6)
    if spread:
        primary = -primary
    return primary * (_NUMA_SPAN * inc.shape[1]) + dev.order


def _selection_rank(dev: DeviceArrays, inc: np.ndarray, weights: tuple[int, int, int]) -> np.ndarray:
    """Each device's rank in binpack order within its row: ``fgd``'s tie-break among equal growth. It depends on the
    devices alone (:mod:`.devmemo` keeps it per device state)."""
    return np.argsort(np.argsort(_binpack_key(dev, inc, weights), axis=1), axis=1)


def fgd_device_order(devices: Sequence[DeviceUsage], request: Shape,
                     classes: Sequence[tuple[Shape, float, float, float]], host_free: tuple[float, float],
                     host_need: tuple[float, float], weights: tuple[int, int, int] = (1, 1, 1)) -> list[DeviceUsage]:
    """``devices`` ordered for the fit (preferred **last**): most fragmentation growth first, least last;
    equal growth in binpack order. Devices that cannot take the request keep their place at the front."""
    if not devices:
        return list(devices)
    usable = usable_devices(devices, request)
    if len(usable) <= 1:
        return order_without_choice(devices, usable)
    types = sorted({d.type for d in devices})
    free = np.array([host_free], dtype=float)
    dev = DeviceArrays.build([devices], {t: i for i, t in enumerate(types)}, free)
    delta, inc = device_growth(dev, request, _mix_of(tuple(classes), tuple(types)), free - np.asarray(host_need, float))
    key = _selection_key(dev, inc, delta, "fgd", weights)[0, :len(devices)]
    return [devices[i] for i in np.argsort(key, kind="stable")]


def order_without_choice(devices: Sequence[DeviceUsage], usable: list[int]) -> list[DeviceUsage]:
    """:func:`fgd_device_order` where at most the device ``usable`` holds can take the request (a node the fit
    rejects, as every node a failing pod is explained on, or one device left): the stable sort of its keys puts the
    devices that cannot take it first, in their order."""
    last = usable[0] if usable else -1
    return [d for i, d in enumerate(devices) if i != last] + ([devices[last]] if last >= 0 else [])


def order_by_growth(devices: Sequence[DeviceUsage], usable: list[int], delta: Sequence[float],
                    weights: tuple[int, int, int]) -> list[DeviceUsage]:
    """:func:`fgd_device_order` from each device's growth (``delta[i]``, rounded as :func:`device_growth` rounds
    it; read only at ``usable``): the devices that cannot take the request first, in their order, then the others
    by growth, most first, equal growth in binpack order (:func:`_selection_rank`: HAMi's device score, numa,
    position, least first). The sort of :func:`_selection_key`'s keys, ``-delta x (G + 1) x 1e6 + rank``, in
    plain Python: growths are multiples of 1e-6, so a step of growth outweighs every rank, and the binpack key
    ``round(score x 1e6) x 1024 G + (numa + 1) G + position`` (integers, exact in float64) orders as the tuple
    (score, numa, position); the device score is :func:`device_scores`'s arithmetic in the same order."""
    def key(i: int) -> tuple[float, int, int, int]:
        d = devices[i]
        score = 10.0 * (weights[0] * (d.used / d.count if d.count > 0 else 0.0)
                        + weights[1] * (d.usedcores / d.totalcore if d.totalcore > 0 else 0.0)
                        + weights[2] * (d.usedmem / d.totalmem if d.totalmem > 0 else 0.0))
        return -delta[i], round(score * 1e6), min(max(d.numa, -1), _NUMA_SPAN - 2) + 1, i

    chosen = set(usable)
    return [d for i, d in enumerate(devices) if i not in chosen] + [devices[i] for i in sorted(usable, key=key)]


def usable_devices(devices: Sequence[DeviceUsage], request: Shape) -> list[int]:
    """The positions of the devices that could take one device of ``request``: :meth:`_Spec.usable` device by
    device in plain Python (a node's few devices cost less so than building its arrays). The same tests on the same
    figures: comparisons of integers (exact as float64 too) and the percentage's ``floor(total x pct / 100)``
    in float arithmetic, as numpy does it (``tests/engine/test_fgd_order.py`` holds both equal)."""
    cores = float(min(request.cores, 100))
    memreq = float(request.memreq)
    pct = float(_base_key(request)[2])
    typed = bool(request.use_types or request.nouse_types)
    out = []
    for j, d in enumerate(devices):
        if not d.health or not d.used < d.count:
            continue
        totalmem, totalcore = float(d.totalmem), float(d.totalcore)
        need = memreq if memreq > 0 else (math.floor(totalmem * max(pct, 0.0) / 100) if pct >= 0 else 0.0)
        if not totalmem - d.usedmem >= need or not totalcore - d.usedcores >= cores:
            continue
        if cores >= 100 and totalcore == 100 and d.used > 0:
            continue  # a whole card asked of a busy one
        if cores == 0 and totalcore != 0 and d.usedcores >= totalcore:
            continue  # no cores asked of a card whose cores are exhausted
        if typed and not request.accepts(d.type):
            continue
        out.append(j)
    return out


@functools.lru_cache(maxsize=256)
def spec_of(request: Shape, types: tuple[str, ...]) -> _Spec:
    """``_Spec.of([request], types)``, built once per request and type list (a pod's request is one of few shapes,
    and numpy arrays cost microseconds each to build). Its arrays are read-only: they are shared."""
    spec = _Spec.of([request], types)
    for a in (spec.cores, spec.memreq, spec.pct, spec.type_ok):
        if a is not None:
            a.setflags(write=False)
    return spec


@functools.lru_cache(maxsize=16)
def _mix_of(classes: tuple[tuple[Shape, float, float, float], ...], types: tuple[str, ...]) -> Mix:
    """The :class:`Mix` of ``classes`` over ``types``, built once: the fit orders the devices of every candidate
    node against the same mix (a node's types are usually the same few)."""
    return Mix(classes, types)
