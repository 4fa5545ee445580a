"""A memo of the ``fgd`` policy's weighted growth by node state: nodes alike in everything the growth reads share one
computed figure.

Under GPU policy ``fgd`` (the device of least *weighted* growth) a new mix version recomputes a signature's growth on
every node (:mod:`.growth`), and the online mix publishes versions often. Most nodes of a cluster are alike, though:
on the openb default trace a version's 1,213 nodes have some 10-60 distinct states. A node's growth for one signature
and mix depends only on its devices (usage, capacity, type, tie-break order) and on which classes' CPU and memory fit
its free host resources before and after the pod (:func:`~.fragmentation.placement_delta` reads them through these
comparisons alone), so :func:`row_keys` packs exactly those, and :class:`RowMemo` computes each distinct key once per
mix version. See docs/fgd.md, Cost.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hami_core.policies.fgd.fragmentation import Mix
from hami_core.policies.fgd.rowstore import RowStore

__all__ = ["RowMemo", "distinct", "row_keys"]

#: Bytes a memo entry holds besides its key: the dict slot, the bytes object's header and the float.
_ENTRY_OVERHEAD = 120


def row_keys(store: RowStore, rows: np.ndarray, mix: Mix, host_need: tuple[float, float]) -> np.ndarray:
    """One key per row of ``rows``, ``(rows, words)`` int64: equal exactly when the rows' devices (their number in the
    store, :attr:`RowStore.device_id`: equal numbers for bit-for-bit equal devices) and the fit of the mix's classes
    (CPU and memory, before and after ``host_need`` is taken) are equal."""
    host = store.host[rows]
    after = host - np.asarray(host_need, dtype=float)
    fits = np.concatenate([(host[:, :1] >= mix.cpu) & (host[:, 1:] >= mix.mem),
                           (after[:, :1] >= mix.cpu) & (after[:, 1:] >= mix.mem), after >= 0], axis=1)
    packed = np.packbits(fits, axis=1)
    words = -(-packed.shape[1] // 8)
    keys = np.zeros((len(rows), 1 + words), dtype=np.int64)
    keys[:, 0] = store.device_id[rows]
    keys[:, 1:].view(np.uint8)[:, :packed.shape[1]] = packed
    return keys


def distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct key of ``keys`` (``(rows, words)``) and each row's distinct key: ``(first,
    inverse)`` with ``keys[first[inverse]] == keys``, exactly.

    Rows are grouped by a 64-bit hash of their words (a sort of one integer per row, far cheaper than sorting the
    keys' bytes), then checked word for word; a collision (never seen) falls back to grouping the bytes."""
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
    """Growth figures by :func:`row_keys` key for one request signature, one backend's store and one :class:`Mix`
    (cleared when the mix or the store's device numbering (its epoch: a wider store starts one) changes, and by
    :meth:`clear` on a new mix version)."""

    __slots__ = ("_bytes", "_epoch", "_mix", "values")

    def __init__(self) -> None:
        self._mix: Mix | None = None
        self._epoch = -1
        self._bytes = 0
        self.values: dict[bytes, float] = {}

    def clear(self) -> None:
        self.values.clear()
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        """About what the figures hold: their keys plus the dict's, the bytes object's and the float's overhead."""
        return self._bytes

    def growth(self, store: RowStore, rows: np.ndarray, mix: Mix, host_need: tuple[float, float],
               compute: Callable[[np.ndarray], np.ndarray], limit: int) -> np.ndarray:
        """The growth of every row of ``rows``: ``compute(some rows)`` for one row of each key not yet known, the
        memo's figures for the others. At most ``limit`` figures are kept (past it the memo starts afresh)."""
        # a wider store starts a new epoch too (RowStore._widen): the epoch alone says the keys still hold
        if mix is not self._mix or store.epoch != self._epoch:
            self._mix, self._epoch = mix, store.epoch
            self.clear()
        words = row_keys(store, rows, mix, host_need)
        first, inverse = distinct(words)
        keys = [words[i].tobytes() for i in first.tolist()]
        known = [self.values.get(k) for k in keys]
        missing = [i for i, v in enumerate(known) if v is None]
        if missing:
            fresh = compute(rows[first[missing]])
            if len(self.values) + len(missing) > limit:
                self.clear()
            for i, value in zip(missing, fresh.tolist(), strict=True):
                known[i] = self.values[keys[i]] = value
                self._bytes += len(keys[i]) + _ENTRY_OVERHEAD
        return np.array(known, dtype=float)[inverse]
