"""A memo of the ``fgd`` policy's weighted growth by node state: nodes alike in everything the growth reads share one
computed figure, and so do the request signatures that differ only in CPU and memory.

Under GPU policy ``fgd`` (the device of least *weighted* growth) a new mix version recomputes a signature's growth on
every node (:mod:`.growth`), and the online mix publishes versions often. Most nodes of a cluster are alike, though:
on the openb default trace a version's 1,213 nodes have about 200 distinct states. A node's growth for one request
and mix depends only on its devices (usage, capacity, type, tie-break order) and on which classes' CPU and memory fit
its free host resources before and after the pod (:func:`~.fragmentation.placement_delta` reads them through these
comparisons alone). Which classes fit is decided by where the free CPU and memory rank among the classes' CPU and
memory (a class fits where both of its figures are at or below the free ones), so :func:`row_keys` packs the device
state's number and those four ranks (and whether the pod's own CPU and memory fit) into one integer, and
:class:`RowMemo` computes each distinct key once per mix. The key never names the pod's CPU or memory, only what they
leave, so one memo serves every signature of one request (the default trace's 123 signatures ask for 24 requests).
See docs/fgd.md, Cost.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from hami_core.policies.fgd.fragmentation import FitRanks, Mix
from hami_core.policies.fgd.rowstore import RowStore

__all__ = ["RowMemo", "distinct", "row_key", "row_keys"]

#: Bytes a memo entry holds besides its key: the dict slot, the int or tuple and the float.
_ENTRY_OVERHEAD = 100
#: Bits the packed key leaves for the device state's number at most (a signed 64-bit integer).
_KEY_BITS = 62


def _layout(ranks: FitRanks) -> tuple[int, int]:
    """The packed key's layout: the bits of one rank pair (before the pod; the pair after it goes above), and of the
    whole rank part (two pairs and whether the pod's own CPU and memory fit)."""
    return ranks.bits, 2 * ranks.bits + 2


def row_keys(store: RowStore, rows: np.ndarray, mix: Mix, host_need: tuple[float, float]) -> np.ndarray:
    """One key per row of ``rows``: equal exactly when the rows' devices (their number in the store,
    :attr:`RowStore.device_id`: equal numbers for bit-for-bit equal devices) and the ranks of their free CPU and
    memory among the mix's classes' (:class:`~.fragmentation.FitRanks`, which decide which classes fit), before and
    after ``host_need`` is taken, are equal. ``(rows,)`` int64 where the ranks and the state's number fit in 62
    bits, else ``(rows, 2)``."""
    fit = mix.fit_ranks
    pair, bits = _layout(fit)
    host = store.host[rows]
    after = host - np.asarray(host_need, dtype=float)
    rank = fit.ranks(host) | fit.ranks(after) << pair
    rank |= (after[:, 0] >= 0).astype(np.int64) << (2 * pair)
    rank |= (after[:, 1] >= 0).astype(np.int64) << (2 * pair + 1)
    ids = store.device_id[rows].astype(np.int64)
    if bits <= _KEY_BITS - 1 and (not len(ids) or int(ids.max()) < 1 << (_KEY_BITS - bits)):
        return (ids << bits) | rank
    return np.stack([ids, rank], axis=1)


def row_key(store: RowStore, row: int, mix: Mix, host_need: tuple[float, float]) -> Hashable:
    """:func:`row_keys` of one row, in plain Python: what a changed node, most calls, costs."""
    fit = mix.fit_ranks
    pair, bits = _layout(fit)
    cpu, mem = store.host[row].tolist()
    cpu_after, mem_after = cpu - host_need[0], mem - host_need[1]
    rank = (fit.rank(cpu, mem) | fit.rank(cpu_after, mem_after) << pair
            | (cpu_after >= 0) << (2 * pair) | (mem_after >= 0) << (2 * pair + 1))
    ident = int(store.device_id[row])
    if bits <= _KEY_BITS - 1 and ident < 1 << (_KEY_BITS - bits):
        return ident << bits | rank
    return ident, rank


def distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct key of ``keys`` (``(rows,)`` or ``(rows, words)``) and each row's distinct
    key: ``(first, inverse)`` with ``keys[first[inverse]] == keys``, exactly.

    Rows of several words are grouped by a 64-bit hash of their words (a sort of one integer per row, far cheaper
    than sorting the keys' bytes), then checked word for word; a collision (never seen) falls back to grouping the
    bytes."""
    if keys.ndim == 1:
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return first, inverse.ravel()
    codes = keys @ _MIX_WORDS[:keys.shape[1]] if keys.shape[1] <= len(_MIX_WORDS) else None
    if codes is not None:
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
        if np.array_equal(keys, keys[first[inverse]]):
            return first, inverse
    rows = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1] * keys.itemsize))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return first, inverse.ravel()


#: Odd 64-bit multipliers of :func:`distinct`'s hash (products and sums wrap around, as int64 arithmetic does).
_MIX_WORDS = np.random.default_rng(20231).integers(-2**62, 2**62, size=4096, dtype=np.int64) | 1


class RowMemo:
    """Growth figures by :func:`row_keys` key for one request (of any CPU and memory), one backend's store and one
    :class:`Mix`: cleared when the mix (a new mix version) or the store's device numbering (its epoch: a wider store
    starts one) changes."""

    __slots__ = ("_bytes", "_epoch", "_mix", "orders", "values")

    def __init__(self) -> None:
        self._mix: Mix | None = None
        self._epoch = -1
        self._bytes = 0
        self.values: dict[Hashable, float] = {}
        #: the device order (:meth:`FgdState.device_order`) by (key, each listed device's column): positions in the
        #: list, most growth first as the fit wants them
        self.orders: dict[Hashable, tuple[int, ...]] = {}

    def clear(self) -> None:
        self.values.clear()
        self.orders.clear()
        self._bytes = 0

    def key_of(self, store: RowStore, row: int, mix: Mix, host_need: tuple[float, float]) -> Hashable | None:
        """:func:`row_key` of ``row`` where the memo holds ``mix`` on ``store`` as it is (else None)."""
        if mix is not self._mix or store.epoch != self._epoch:
            return None
        return row_key(store, row, mix, host_need)

    def keep_order(self, key: Hashable, order: tuple[int, ...], limit: int) -> None:
        if len(self.orders) >= limit:
            self.orders.clear()
        self.orders[key] = order
        self._bytes += _ENTRY_OVERHEAD + 8 * len(order)

    @property
    def nbytes(self) -> int:
        """About what the figures hold: the dict's, the key's and the float's overhead."""
        return self._bytes

    def growth(self, store: RowStore, rows: np.ndarray, mix: Mix, host_need: tuple[float, float],
               compute: Callable[[np.ndarray], np.ndarray], limit: int) -> np.ndarray:
        """The growth of every row of ``rows`` for a pod taking ``host_need``: ``compute(some rows)`` (the growth of a
        pod of that need) for one row of each key not yet known, the memo's figures for the others. At most ``limit``
        figures are kept (past it the memo starts afresh)."""
        if mix is not self._mix or store.epoch != self._epoch:
            self._mix, self._epoch = mix, store.epoch
            self.clear()
        values = self.values
        if len(rows) == 1:  # a changed node (most calls): one key, no arrays
            key = row_key(store, int(rows[0]), mix, host_need)
            value = values.get(key)
            if value is None:
                value = float(compute(rows)[0])
                if len(values) + 1 > limit:
                    self.clear()
                values[key] = value
                self._bytes += _ENTRY_OVERHEAD
            return np.full(1, value)
        codes = row_keys(store, rows, mix, host_need)
        first, inverse = distinct(codes)
        picked = codes[first]
        keys: list[Hashable] = picked.tolist() if picked.ndim == 1 else [tuple(k) for k in picked.tolist()]
        known = [values.get(k) for k in keys]
        missing = [i for i, v in enumerate(known) if v is None]
        if missing:
            fresh = compute(rows[first[missing]])
            if len(values) + len(missing) > limit:
                self.clear()
            for i, value in zip(missing, fresh.tolist(), strict=True):
                known[i] = values[keys[i]] = value
            self._bytes += len(missing) * _ENTRY_OVERHEAD
        if len(known) == 1:
            return np.full(len(rows), known[0])
        return np.array(known, dtype=float)[inverse]
