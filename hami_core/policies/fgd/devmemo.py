"""The device half of the ``fgd`` policy's weighted growth, memoised by device state for one mix version.

Under GPU policy ``fgd`` a one-device request's growth on a node of one device type is, per device ``j``
(:func:`~.fragmentation.device_growth`, by bases), ``W t2_j + sum_g y_g E_gj - weighted``: ``t2`` (the free share
after the placement) and ``E`` (per group of classes, what its strand gains where it still fits) depend only on the
node's devices, the request and the mix's bases and groups; ``y`` (the weight of each group's classes that accept
the node and fit its CPU and memory after the pod) and ``weighted`` (the node's fragmentation) on its host and the
weights. The pods of one mix version with the same request (whatever their CPU and memory) and the nodes with the
same devices (whatever their free CPU and memory) so share the device half (``inc``, ``t2``, ``E`` and the
tie-break ranks): :class:`DeviceMemo` computes it once per device state (:attr:`RowStore.device_id`) and
:func:`single_growth` adds the host half. Every figure is the same element-wise arithmetic as
:func:`~.fragmentation.placement_delta` on the same inputs, so the growth is the same (tests/engine/
test_fgd_devmemo.py). See docs/fgd.md, Cost.
"""

from __future__ import annotations

import numpy as np

from hami_core.engine.workload import Shape
from hami_core.policies.fgd.fragmentation import (
    Mix,
    MixState,
    _host_fits,
    _Post,
    _selection_rank,
    _Spec,
    placement_delta,
)
from hami_core.policies.fgd.rowstore import RowStore

__all__ = ["MAX_STATES", "DeviceMemo", "single_growth"]

#: Device states one :class:`DeviceMemo` holds before it starts afresh (its memory is states x devices x groups).
MAX_STATES = 20_000


class DeviceMemo:
    """The device half of one one-device request's growth under one :class:`Mix` (and GPU policy weights), per
    device state of one store: ``inc`` (which devices can take it), ``t2``, ``E`` and ``rank``, in slots."""

    __slots__ = ("_epoch", "_mix", "_width", "e", "inc", "rank", "slot", "t2")

    def __init__(self) -> None:
        self._mix: Mix | None = None
        self._width = -1
        self._epoch = -1
        self.slot: dict[int, int] = {}
        self.inc = np.zeros((0, 0), dtype=bool)
        self.t2 = np.zeros((0, 0))
        self.rank = np.zeros((0, 0), dtype=np.intp)
        self.e = np.zeros((0, 0, 0))

    @property
    def nbytes(self) -> int:
        return self.inc.nbytes + self.t2.nbytes + self.rank.nbytes + self.e.nbytes + 100 * len(self.slot)

    def valid_for(self, store: RowStore, mix: Mix) -> None:
        """Clear unless it was filled for ``mix`` on ``store`` as it is now (its width and device numbering), or
        when it holds :data:`MAX_STATES` states (a bound on its memory: past it, it starts afresh)."""
        if (mix is not self._mix or store.width != self._width or store.epoch != self._epoch
                or len(self.slot) >= MAX_STATES):
            self._mix, self._width, self._epoch = mix, store.width, store.epoch
            self.slot = {}
            groups = len(mix.groups[1])
            self.inc = np.zeros((0, store.width), dtype=bool)
            self.t2 = np.zeros((0, store.width))
            self.rank = np.zeros((0, store.width), dtype=np.intp)
            self.e = np.zeros((groups, 0, store.width))

    def _grow(self, more: int) -> int:
        """Room for ``more`` states after those held (capacity doubles: one new state per scheduled pod copies the
        arrays a logarithmic number of times, not once per pod); the first new slot."""
        start, need = len(self.slot), len(self.slot) + more
        if need > len(self.t2):
            cap = max(need, 2 * len(self.t2), 16)

            def grown(a: np.ndarray, axis: int) -> np.ndarray:
                shape = list(a.shape)
                shape[axis] = cap
                out = np.zeros(shape, dtype=a.dtype)
                out[(slice(None),) * axis + (slice(0, start),)] = a[(slice(None),) * axis + (slice(0, start),)]
                return out

            self.inc, self.t2, self.rank = grown(self.inc, 0), grown(self.t2, 0), grown(self.rank, 0)
            self.e = grown(self.e, 1)
        return start

    def slots(self, store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, state: MixState,
              weights: tuple[int, int, int]) -> np.ndarray:
        """The slot of each row's device state, computing the device half of the states not yet known (``state``:
        the rows' state under ``mix``)."""
        ids = store.device_id[rows].tolist()
        new: dict[int, int] = {}
        for i, d in enumerate(ids):
            if d not in self.slot and d not in new:
                new[d] = i
        if new:
            at = np.fromiter(new.values(), dtype=np.intp, count=len(new))
            self._compute(store, rows[at], request, mix, state.take(at), weights, list(new))
        return np.fromiter(map(self.slot.__getitem__, ids), dtype=np.intp, count=len(ids))

    def _compute(self, store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, state: MixState,
                 weights: tuple[int, int, int], ids: list[int]) -> None:
        dev = store.view(rows)
        spec = _Spec.of([request], mix.types)
        inc = spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)[0]
        post = _Post(dev, spec.need(dev.totalmem)[0], float(spec.cores[0, 0, 0]))
        # as fragmentation._growth_by_base, up to the host half
        ub = mix.base_spec.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (B, R, G)
        ub2 = mix.base_spec.usable(dev, post.used, post.cores, post.mem)
        n2 = state.n_base[:, :, None] - ub + ub2
        s2 = state.s_base[:, :, None] - np.where(ub, 0.0, post.share) + np.where(ub2, 0.0, post.post_share)
        t2 = state.total[:, None] - post.share + post.post_share  # (R, G)
        _, group_base, group_nums = mix.groups
        fits = n2[group_base] >= group_nums[:, None, None]  # (groups, R, G)
        e = np.where(fits, s2[group_base] - t2, 0.0)
        rank = _selection_rank(dev, inc, weights)
        start = self._grow(len(ids))
        end = start + len(ids)
        self.inc[start:end], self.t2[start:end], self.rank[start:end] = inc, t2, rank
        self.e[:, start:end] = e
        for k, d in enumerate(ids):
            self.slot[d] = start + k


def single_growth(store: RowStore, rows: np.ndarray, request: Shape, mix: Mix, state: MixState,
                  weights: tuple[int, int, int], host_need: tuple[float, float], memo: DeviceMemo) -> np.ndarray:
    """:func:`~.fragmentation.placement_delta` (select ``fgd``) of a one-device ``request`` on ``rows`` of ``store``
    (``state``: their state under ``mix``), its device half from ``memo``. Rows mixing device types, and an empty
    mix, are computed by :func:`placement_delta` itself."""
    if request.nums != 1 or not len(mix) or state.mixed.any():
        return placement_delta(store.view(rows), request, mix, select="fgd", weights=weights, host_need=host_need,
                               state=state)
    memo.valid_for(store, mix)
    at = memo.slots(store, rows, request, mix, state, weights)
    inc, t2, rank = memo.inc[at], memo.t2[at], memo.rank[at]
    e = np.take(memo.e, at, axis=1)
    host_after = store.host[rows] - np.asarray(host_need, dtype=float)
    member, _, _ = mix.groups
    y = (member * mix.weight) @ (mix.accepts(state.row_type) & _host_fits(host_after, mix))  # (groups, R)
    gain = np.einsum("gr,grj->rj", y, e)
    delta = np.round(mix.weight.sum() * t2 + gain - state.weighted[:, None], 6)
    key = np.where(inc, -delta * (inc.shape[1] + 1) * 1e6 + rank, -np.inf)
    n = np.arange(len(rows))
    pick = np.argmax(key, axis=1)
    alive = inc[n, pick]
    total = np.zeros(len(rows)) + np.where(alive, delta[n, pick], 0.0)
    alive &= (host_after[:, 0] >= 0) & (host_after[:, 1] >= 0)
    return np.where(alive, np.round(total, 6), np.inf)
