"""The device half of the ``fgd`` policy's weighted growth, memoised by device state across mix versions.

Under GPU policy ``fgd`` a one-device request's growth on a node of one device type is, per device ``j``
(:func:`~.fragmentation.device_growth`, by bases), ``W t2_j + sum_g y_g E_gj - weighted``: ``t2`` (the free share
after the placement) depends only on the node's devices and the request; ``E`` (per group of classes, what its
strand gains where it still fits) on them and on the group's base and device count, through each base's usable
devices and strand after the placement (``n2``, ``s2``); ``y`` (the weight of each group's classes that accept the
node and fit its CPU and memory after the pod) and ``weighted`` (the node's fragmentation) on its host and the mix.
The pods with the same request (whatever their CPU and memory) and the nodes with the same devices (whatever their
free CPU and memory) so share ``inc``, ``t2``, the tie-break ranks and, per base, ``n2``/``s2``, under every mix
version: :class:`DeviceMemo` keeps them per device state (:attr:`RowStore.device_id`) and per base (what a class
books on one device: a new version's classes mostly book as the last one's did), computing a state's figures for a
base the first time a mix asks, and :func:`single_growth` adds ``E`` and the host half. Every figure is the same
element-wise arithmetic as :func:`~.fragmentation.placement_delta` on the same inputs, so the growth is the same
(tests/engine/test_fgd_devmemo.py). See docs/fgd.md, Cost.
"""

from __future__ import annotations

import numpy as np

from hami_core.engine.workload import Shape
from hami_core.policies.fgd.fragmentation import (
    DeviceArrays,
    Mix,
    _host_fits,
    _Post,
    _selection_rank,
    _Spec,
    placement_delta,
    spec_of,
)
from hami_core.policies.fgd.rowstore import RowStore

__all__ = ["MAX_BASES", "MAX_STATES", "DeviceMemo", "device_deltas", "single_growth"]

#: Device states one :class:`DeviceMemo` holds before it starts afresh (its memory is states x devices x bases).
MAX_STATES = 8192
#: Bases one :class:`DeviceMemo` holds figures for before it starts afresh.
MAX_BASES = 64


class DeviceMemo:
    """The device half of one one-device request's growth (under GPU policy weights), per device state of one
    store: ``inc`` (which devices can take it), ``t2`` and ``rank`` in state slots, and per base (in base slots)
    ``n2``/``s2``, valid where ``have[base slot, state slot]``."""

    __slots__ = ("_buffer", "_epoch", "_mix", "_mix_bases", "_types", "bases", "e", "e_have", "have",
                 "inc", "n2", "rank", "s2", "slot_of", "states", "t2")

    def __init__(self) -> None:
        self._epoch = -1
        self._types = -1
        self._mix: Mix | None = None
        self._mix_bases = np.zeros(0, dtype=np.intp)
        self._reset(1)

    def _reset(self, width: int) -> None:
        #: the slot of each device state number (-1: not held)
        self.slot_of = np.full(0, -1, dtype=np.intp)
        self.states = 0
        #: base key (:attr:`Mix.base_keys`) -> base slot
        self.bases: dict[tuple[int, int, int], int] = {}
        self.inc = np.zeros((0, width), dtype=bool)
        self.t2 = np.zeros((0, width))
        self.rank = np.zeros((0, width), dtype=np.intp)
        self.n2 = np.zeros((0, 0, width), dtype=np.int16)  # usable devices: a handful, exact in int16
        self.s2 = np.zeros((0, 0, width))
        self.have = np.zeros((0, 0), dtype=bool)
        #: ``E`` of the last mix's groups, ``(groups, state slots, devices)``, valid where ``e_have``
        self.e = np.zeros((0, 0, width))
        self.e_have = np.zeros(0, dtype=bool)
        self._buffer = np.empty(0)
        self._mix = None

    @property
    def nbytes(self) -> int:
        return (self.slot_of.nbytes + self.inc.nbytes + self.t2.nbytes + self.rank.nbytes + self.n2.nbytes
                + self.s2.nbytes + self.have.nbytes + self.e.nbytes + self._buffer.nbytes + 100 * len(self.bases))

    def valid_for(self, store: RowStore, mix: Mix) -> None:
        """Clear unless it was filled on ``store`` as it is now (its width, device numbering and types), or when it
        holds :data:`MAX_STATES` states or :data:`MAX_BASES` bases (a bound on its memory: past it, it starts
        afresh)."""
        new_bases = 0 if mix is self._mix else sum(k not in self.bases for k in mix.base_keys)
        # a wider store starts a new epoch too (RowStore._widen)
        if (store.epoch != self._epoch or len(store.types) != self._types
                or self.states >= MAX_STATES or len(self.bases) + new_bases > MAX_BASES):
            self._epoch, self._types = store.epoch, len(store.types)
            self._reset(store.width)

    def _base_slots(self, mix: Mix) -> np.ndarray:
        """The base slot of each of ``mix``'s bases (new bases get a slot, no state has figures for it yet)."""
        if mix is self._mix:
            return self._mix_bases
        new = [k for k in mix.base_keys if k not in self.bases]
        if new:
            for k in new:
                self.bases[k] = len(self.bases)
            more = len(self.bases) - self.n2.shape[0]
            self.n2 = np.concatenate([self.n2, np.zeros((more, *self.n2.shape[1:]), dtype=self.n2.dtype)])
            self.s2 = np.concatenate([self.s2, np.zeros((more, *self.s2.shape[1:]))])
            self.have = np.concatenate([self.have, np.zeros((more, self.have.shape[1]), dtype=bool)])
        self._mix = mix
        self._mix_bases = np.array([self.bases[k] for k in mix.base_keys], dtype=np.intp)
        self.e = np.zeros((len(mix.groups[1]), len(self.t2), self.t2.shape[1]))
        self.e_have = np.zeros(len(self.t2), dtype=bool)
        return self._mix_bases

    def _grow(self, more: int) -> int:
        """Room for ``more`` states after those held (capacity doubles: one new state per scheduled pod copies the
        arrays a logarithmic number of times, not once per pod); the first new slot."""
        start, need = self.states, self.states + more
        if need > len(self.t2):
            cap = max(need, 2 * len(self.t2), 16)

            def grown(a: np.ndarray, axis: int) -> np.ndarray:
                shape = list(a.shape)
                shape[axis] = cap
                out = np.zeros(shape, dtype=a.dtype)
                out[(slice(None),) * axis + (slice(0, start),)] = a[(slice(None),) * axis + (slice(0, start),)]
                return out

            self.inc, self.t2, self.rank = grown(self.inc, 0), grown(self.t2, 0), grown(self.rank, 0)
            self.n2, self.s2, self.have = grown(self.n2, 1), grown(self.s2, 1), grown(self.have, 1)
            self.e, self.e_have = grown(self.e, 1), grown(self.e_have, 0)
        self.states = need
        return start

    def slots(self, store: RowStore, rows: np.ndarray, request: Shape, mix: Mix,
              weights: tuple[int, int, int]) -> np.ndarray:
        """The slot of each row's device state, computing what the states lack: a state new to the memo its
        device figures; a state without ``E`` for ``mix`` that, and its figures for ``mix``'s bases where it has
        none (from the rows themselves: a row's devices are its state's)."""
        ids = store.device_id[rows]
        top = int(ids.max()) + 1 if len(ids) else 0
        if top > len(self.slot_of):
            self.slot_of = np.concatenate([self.slot_of, np.full(max(top, 2 * len(self.slot_of)) - len(self.slot_of),
                                                                 -1, dtype=np.intp)])
        at = self.slot_of[ids]
        bases = self._base_slots(mix)
        if len(rows) == 1 and at[0] < 0:  # a changed node (most calls): no grouping
            start = self._grow(1)
            self.slot_of[ids] = start
            self._compute(store, rows, request, mix, bases, weights, start)
            at = self.slot_of[ids]
        elif (at < 0).any():
            fresh, first = np.unique(ids[at < 0], return_index=True)
            where = np.flatnonzero(at < 0)[first]
            start = self._grow(len(fresh))
            self.slot_of[fresh] = np.arange(start, start + len(fresh))
            self._compute(store, rows[where], request, mix, bases, weights, start)
            at = self.slot_of[ids]
        lack = ~self.e_have[at]
        if lack.any():
            if len(at) == 1:
                states, first = at, np.zeros(1, dtype=np.intp)
            else:
                states, first = np.unique(at[lack], return_index=True)
            missing = ~self.have[bases][:, states].all(axis=0)
            if missing.any():
                # each state lacking a base once (a row of it), figures for every base of the mix (those it had
                # are the same again)
                self._base_half(store, rows[np.flatnonzero(lack)[first[missing]]], request, mix, bases,
                                states[missing])
            # as fragmentation._growth_by_base: what each group's strand gains where it still fits (the states'
            # columns gathered first, then the groups' bases: the same figures as one (groups, states) gather,
            # about half the cost)
            _, group_base, group_nums = mix.groups
            gb = bases[group_base]
            n2, s2 = np.take(self.n2, states, axis=1), np.take(self.s2, states, axis=1)
            fits = np.take(n2, gb, axis=0) >= group_nums[:, None, None]  # (groups, states, G)
            self.e[:, states] = np.where(fits, np.take(s2, gb, axis=0) - np.take(self.t2, states, axis=0), 0.0)
            self.e_have[states] = True
        return at

    def gather_e(self, at: np.ndarray) -> np.ndarray:
        """``E`` of the states ``at`` (:meth:`slots`), ``(groups, len(at), G)``, in a buffer the memo reuses (fresh
        arrays of a few hundred KB cost more in page faults than the gather): valid until the next call."""
        groups, _, width = self.e.shape
        size = groups * len(at) * width
        if len(self._buffer) < size:
            self._buffer = np.empty(max(size, 2 * len(self._buffer)))
        out = self._buffer[:size].reshape(groups, len(at), width)
        np.take(self.e, at, axis=1, out=out, mode="clip")  # valid slots: "clip" avoids a copy
        return out

    def _compute(self, store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, bases: np.ndarray,
                 weights: tuple[int, int, int], start: int) -> None:
        """The figures of new states (``rows``: one of each, their slots from ``start``): device half and
        ``mix``'s bases at once (one view of the rows, one booking)."""
        dev = store.view(rows)
        spec = spec_of(request, tuple(mix.types))
        need = spec.need(dev.totalmem)
        inc = spec.usable(dev, dev.used, dev.usedcores, dev.usedmem, need)[0]
        post = _Post(dev, need[0], float(spec.cores[0, 0, 0]))
        end = start + len(rows)
        # as fragmentation._growth_by_base: the row's free share (MixState.total) less the device's before, plus
        # after
        self.t2[start:end] = post.share.sum(axis=1)[:, None] - post.share + post.post_share
        self.inc[start:end] = inc
        self.rank[start:end] = _selection_rank(dev, inc, weights)
        self._bases_of(dev, post, mix, bases, np.arange(start, end))

    def _base_half(self, store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, bases: np.ndarray,
                   states: np.ndarray) -> None:
        dev = store.view(rows)
        spec = spec_of(request, tuple(mix.types))
        self._bases_of(dev, _Post(dev, spec.need(dev.totalmem)[0], float(spec.cores[0, 0, 0])), mix, bases, states)

    def _bases_of(self, dev: DeviceArrays, post: _Post, mix: Mix, bases: np.ndarray, states: np.ndarray) -> None:
        # as fragmentation._growth_by_base, on the figures MixState.of keeps per base (Mix.counts)
        base_spec: _Spec = mix.base_spec
        ub = base_spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (B, R, G)
        n_base = ub.sum(axis=2).astype(float)
        s_base = np.where(ub, 0.0, post.share).sum(axis=2)
        ub2 = base_spec.usable(dev, post.used, post.cores, post.mem)
        n2 = n_base[:, :, None] - ub + ub2
        s2 = s_base[:, :, None] - np.where(ub, 0.0, post.share) + np.where(ub2, 0.0, post.post_share)
        where = (bases[:, None], states[None, :])  # np.ix_'s indices, without its cost
        self.n2[where] = n2
        self.s2[where] = s2
        self.have[where] = True


def single_growth(store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, weights: tuple[int, int, int],
                  host_need: tuple[float, float], memo: DeviceMemo) -> np.ndarray:
    """:func:`~.fragmentation.placement_delta` (select ``fgd``) of a one-device ``request`` on ``rows`` of ``store``
    under ``mix`` (the store's :meth:`~RowStore.mix_for`), its device half from ``memo``. Rows mixing device types,
    and an empty mix, are computed by :func:`placement_delta` itself."""
    weighted, row_type, mixed = store.row_figures(rows, mix)
    if request.nums != 1 or not len(mix) or mixed.any():
        return placement_delta(store.view(rows), request, mix, select="fgd", weights=weights, host_need=host_need,
                               state=store.state(rows, mix))
    inc, delta, rank, host_after = device_deltas(store, rows, request, mix, weights, host_need, memo, weighted,
                                                 row_type)
    key = np.where(inc, -delta * (inc.shape[1] + 1) * 1e6 + rank, -np.inf)
    n = np.arange(len(rows))
    pick = np.argmax(key, axis=1)
    alive = inc[n, pick]
    total = np.zeros(len(rows)) + np.where(alive, delta[n, pick], 0.0)
    alive &= (host_after[:, 0] >= 0) & (host_after[:, 1] >= 0)
    return np.where(alive, np.round(total, 6), np.inf)


def device_deltas(store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, weights: tuple[int, int, int],
                  host_need: tuple[float, float], memo: DeviceMemo, weighted: np.ndarray, row_type: np.ndarray,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row and device of ``store``'s rows of one device type (``weighted``, ``row_type``: theirs,
    :meth:`RowStore.row_figures`): which devices can take one device of ``request``, the growth if it goes there
    (:func:`~.fragmentation.device_growth`, rounded), the devices' ranks in binpack order, and the rows' free CPU
    and memory after the pod."""
    memo.valid_for(store, mix)
    at = memo.slots(store, rows, request, mix, weights)
    inc, t2, rank = memo.inc[at], memo.t2[at], memo.rank[at]
    member, _, _ = mix.groups
    e = memo.gather_e(at)
    host_after = store.host[rows] - np.asarray(host_need, dtype=float)
    y = (member * mix.weight) @ (mix.accepts(row_type) & _host_fits(host_after, mix))  # (groups, R)
    gain = np.einsum("gr,grj->rj", y, e)
    return inc, np.round(mix.weight.sum() * t2 + gain - weighted[:, None], 6), rank, host_after
