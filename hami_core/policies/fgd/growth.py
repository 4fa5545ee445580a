"""The ``fgd`` policy's growth caches: per request signature, every node's fragmentation growth at the node's
table stamp, so a decision recomputes only the nodes that changed since the last pod of the same signature.

Where the device choice does not depend on the mix (GPU policy binpack/spread, pods without devices) a signature
holds each class's unweighted growth (:class:`_ClassCache`), so a new mix version only re-weights it and computes
the classes new to the mix; under GPU policy ``fgd`` (the device of least *weighted* growth) a new version
recomputes (:class:`_Cache`). The caches of one engine are bounded (``scheduler.fgd.cacheMiB``), least recently
used signatures dropped first. See docs/fgd.md, Cost.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hami_core.engine.workload import Shape
from hami_core.plugins.types import DeviceUsage, NodeBatch
from hami_core.policies.fgd.devmemo import DeviceMemo, device_deltas, single_growth
from hami_core.policies.fgd.fragmentation import (
    WEIGHT_FREE_SELECTS,
    Mix,
    class_deltas,
    column_deltas,
    host_class_deltas,
    order_by_growth,
    order_without_choice,
    placement_delta,
    usable_devices,
)
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.rowmemo import RowMemo
from hami_core.policies.fgd.rowstore import RowStore

__all__ = ["CACHE_BYTES", "FgdState", "node_growth"]


#: Bytes of growth caches one engine keeps by default (``scheduler.fgd.cacheMiB``); beyond it the least recently
#: used request signatures are dropped.
#: A signature whose device choice does not depend on the mix keeps ``classes x table rows`` float64 deltas plus,
#: for a one-device request, ``2 x bases x rows`` per-base figures (5,000 nodes x 46 classes: ~2.7 MB; 1,213 nodes
#: x ~100 classes, the gpuspec33 mix: ~1.3 MB), so this holds about 100-200 of them.
CACHE_BYTES = 256 * 2**20


class _Cache:
    """Fragmentation growth per table row for one request signature, valid at the row's stamp and one mix
    version. For select ``fgd``, whose device choice (the least weighted growth) depends on the weights."""

    __slots__ = ("stamp", "value", "version")

    def __init__(self) -> None:
        self.version = -1
        self.stamp = np.full(0, -1, dtype=np.int64)
        self.value = np.zeros(0)

    def ensure(self, size: int) -> None:
        if size > len(self.stamp):
            grow = max(size, 2 * len(self.stamp)) - len(self.stamp)
            self.stamp = np.concatenate([self.stamp, np.full(grow, -1, dtype=np.int64)])
            self.value = np.concatenate([self.value, np.zeros(grow)])

    @property
    def nbytes(self) -> int:
        return self.stamp.nbytes + self.value.nbytes


class _ClassCache(_Cache):
    """Per class of the mix, the unweighted growth per table row (:func:`class_deltas`) for one request signature
    whose device choice does not depend on the mix (select ``binpack``/``spread``, or no device at all).

    Valid at the row's stamp under any weights: a new mix version re-weights the cached rows and computes only
    the classes new to the mix on them; ``value`` is the weighted growth at ``version``. ``deltas[backend]`` is
    ``(slots, capacity)``: class ``keys[backend][k]`` (a :attr:`Mix.keys` entry) in row ``slot[k]``; a class
    leaving the mix frees its slot for the next new one, so a new class set moves no data. ``picks[i]``: the
    devices request ``i`` takes on each row, ``(nums, capacity)``; ``alive``: whether the pod can go there.
    """

    __slots__ = ("_bases_laid_out", "_laid_out", "alive", "base_slot", "deltas", "keys", "n2", "picks", "s2",
                 "single", "t2")

    def __init__(self, shapes: tuple[Shape, ...]) -> None:
        super().__init__()
        self.alive = np.zeros(0, dtype=bool)
        self.deltas: dict[str, np.ndarray] = {}
        self.keys: dict[str, dict[Any, int]] = {}
        self.picks = [np.zeros((s.nums, 0), dtype=np.intp) for s in shapes]
        self._laid_out: dict[str, tuple[Mix, np.ndarray]] = {}  # the last mix :meth:`slots` laid out, per backend
        #: One request of one device (most pods): the per-base figures after it (:func:`column_deltas`) are kept
        #: too, ``n2``/``s2`` ``(base slots, capacity)`` (base ``k`` in row ``base_slot[k]``) and ``t2``, so a
        #: class new to the mix costs a few operations per row.
        self.single = len(shapes) == 1 and shapes[0].nums == 1
        self.base_slot: dict[Any, int] = {}
        self.n2 = np.zeros((0, 0))
        self.s2 = np.zeros((0, 0))
        self.t2 = np.zeros(0)
        self._bases_laid_out: tuple[Mix, np.ndarray] | None = None

    def ensure(self, size: int) -> None:
        old = len(self.stamp)
        super().ensure(size)
        grow = len(self.stamp) - old
        if grow:
            self.alive = np.concatenate([self.alive, np.zeros(grow, dtype=bool)])
            self.deltas = {b: np.concatenate([d, np.zeros((d.shape[0], grow))], axis=1) for b, d in self.deltas.items()}
            self.picks = [np.concatenate([p, np.zeros((p.shape[0], grow), dtype=np.intp)], axis=1) for p in self.picks]
            if self.single:
                self.n2 = np.concatenate([self.n2, np.zeros((self.n2.shape[0], grow))], axis=1)
                self.s2 = np.concatenate([self.s2, np.zeros((self.s2.shape[0], grow))], axis=1)
                self.t2 = np.concatenate([self.t2, np.zeros(grow)])

    def bases(self, mix: Mix) -> np.ndarray:
        """The row of each of ``mix``'s bases in ``n2``/``s2`` (see :meth:`slots`). A base leaving the mix is
        dropped: rows computed later do not have its figures."""
        last = self._bases_laid_out
        if last is not None and (last[0] is mix or last[0].base_keys == mix.base_keys):
            self._bases_laid_out = (mix, last[1])
            return last[1]
        keys = mix.base_keys
        current = set(keys)
        for gone in [k for k in self.base_slot if k not in current]:
            del self.base_slot[gone]
        free = sorted(set(range(self.n2.shape[0])) - set(self.base_slot.values()))
        new = [k for k in keys if k not in self.base_slot]
        if len(new) > len(free):
            extra = max(len(new) - len(free), self.n2.shape[0] // 2)
            free += list(range(self.n2.shape[0], self.n2.shape[0] + extra))
            self.n2 = np.concatenate([self.n2, np.zeros((extra, len(self.stamp)))])
            self.s2 = np.concatenate([self.s2, np.zeros((extra, len(self.stamp)))])
        for k, row in zip(new, free, strict=False):
            self.base_slot[k] = row
        slots = np.array([self.base_slot[k] for k in keys], dtype=np.intp)
        self._bases_laid_out = (mix, slots)
        return slots

    def slots(self, backend: str, mix: Mix) -> tuple[np.ndarray, list[int]]:
        """The row of each of ``mix``'s classes in ``deltas[backend]``, assigning rows to new classes (freed rows
        first, the array grown when none is left); and which of ``mix``'s classes are new."""
        last = self._laid_out.get(backend)
        if last is not None and (last[0] is mix or last[0].keys == mix.keys):  # same classes: same rows
            self._laid_out[backend] = (mix, last[1])
            return last[1], []
        slot = self.keys.setdefault(backend, {})
        deltas = self.deltas.get(backend, np.zeros((0, len(self.stamp))))
        keys = mix.keys
        current = set(keys)
        for gone in [k for k in slot if k not in current]:
            del slot[gone]
        new = [j for j, k in enumerate(keys) if k not in slot]
        free = sorted(set(range(deltas.shape[0])) - set(slot.values()))
        if len(new) > len(free):
            extra = max(len(new) - len(free), deltas.shape[0] // 2)
            free += list(range(deltas.shape[0], deltas.shape[0] + extra))
            deltas = np.concatenate([deltas, np.zeros((extra, deltas.shape[1]))])
        for j, row in zip(new, free, strict=False):
            slot[keys[j]] = row
        self.deltas[backend] = deltas
        slots = np.array([slot[k] for k in keys], dtype=np.intp)
        self._laid_out[backend] = (mix, slots)
        return slots, new

    @property
    def nbytes(self) -> int:
        return (super().nbytes + self.alive.nbytes + sum(d.nbytes for d in self.deltas.values())
                + sum(p.nbytes for p in self.picks) + self.n2.nbytes + self.s2.nbytes + self.t2.nbytes)


#: Weighted growth is summed in fixed point, in units of 1e-10 milli: each term ``w_c x delta_c`` is rounded to an
#: integer (held in a float64), and sums of integers below 2**53 are exact in any order, so a row's growth does not
#: depend on the order of the classes (a cache keeping classes in slots gives the fresh figure exactly).
#: ``sum_c w_c |delta_c|`` is at most a node's free share (16 GPUs: 16,000 milli): x 1e10 < 2**53 / 50.
_FIXED = 1e10


#: :meth:`FgdState._check_memos` sums the memos' bytes once in this many uses.
_MEMO_CHECK = 256


def _memo_limit(table_rows: int) -> int:
    """Entries a :class:`RowMemo` keeps (figures, and device orders apart) before it starts afresh: a few per table
    row, as its signatures of one request see each node in a few host states."""
    return 4 * table_rows + 256


def _columns(rows: np.ndarray) -> np.ndarray | slice:
    """``rows`` as a slice when they are ``0..n-1`` in order (a batch of every node), else as they are."""
    n = len(rows)
    if n and rows[0] == 0 and rows[-1] == n - 1 and (n < 3 or bool((np.diff(rows) == 1).all())):
        return slice(0, n)
    return rows


def _gather(a: np.ndarray, which: np.ndarray, cols: np.ndarray | slice) -> np.ndarray:
    """``a[which][:, cols]``: whole rows first, then the columns (a view where ``cols`` is a slice)."""
    picked = a[which]
    return picked[:, cols] if isinstance(cols, slice) else np.take(picked, cols, axis=1)


def _scatter(a: np.ndarray, which: np.ndarray, cols: np.ndarray | slice, values: np.ndarray) -> None:
    """``a[which][:, cols] = values`` (in place)."""
    if isinstance(cols, slice):
        a[which, cols] = values
    else:
        a[np.ix_(which, cols)] = values


def _fixed_sum(weight: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``weight @ deltas`` in fixed point (integers held in float64; the weight of a row of ``deltas`` held by no
    class is 0). ``deltas`` are overwritten."""
    np.multiply(deltas, (weight * _FIXED)[:, None], out=deltas)
    np.rint(deltas, out=deltas)
    return deltas.sum(axis=0)


def _weigh(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """``sum_b w_b @ deltas_b`` over the ``(weights, deltas)`` of each backend, summed exactly in fixed point and
    rounded to 1e-6 milli. ``deltas`` are overwritten."""
    if not parts:
        raise ValueError("no backend to weigh")
    return _from_fixed(sum((_fixed_sum(w, d) for w, d in parts), np.zeros(parts[0][1].shape[1])))


def _from_fixed(total: np.ndarray) -> np.ndarray:
    return np.round(total / _FIXED, 6)


class FgdState:
    """The policy's per-engine caches (kept in ``NodeBatch.cache``): per backend, every row's devices and
    mix state (:class:`RowStore`); per request signature, every row's growth at the row's stamp (per class
    where the device choice does not depend on the mix, so a new mix version only re-weights it), at most
    :data:`CACHE_BYTES` of them, least recently used dropped first."""

    def __init__(self, cache_bytes: int = CACHE_BYTES) -> None:
        self.cache_bytes = cache_bytes
        self.by_signature: OrderedDict[tuple[Any, ...], _Cache] = OrderedDict()
        self.stores: dict[str, RowStore] = {}
        self._buffer = np.empty(0)
        #: select ``fgd``: the device half of one-device requests' growth (:mod:`.devmemo`), per (backend, request,
        #: weights), across mix versions
        self._device_memos: dict[tuple[str, Shape, tuple[int, int, int]], DeviceMemo] = {}
        #: select ``fgd``: each request's growth by node state under the current mix (:mod:`.rowmemo`), per
        #: (backend, request, weights, select), shared by the signatures of every CPU and memory
        self._row_memos: dict[tuple[str, Shape, tuple[int, int, int], str], RowMemo] = {}
        self._memo_uses = 0

    def growth(self, batch: NodeBatch, workload: Workload, select: str, weights: tuple[int, int, int],
               host: tuple[int, int]) -> np.ndarray:
        shapes = tuple(batch.shapes)
        if not shapes and not any(host):  # no device, no CPU or memory: nothing changes
            return np.zeros(len(batch.nodes))
        rows = np.asarray(batch.rows, dtype=np.intp)
        stamps = np.asarray(batch.generations, dtype=np.int64)
        if not shapes:
            self.refresh(rows, stamps, batch.nodes, shapes, workload)
            return self._deviceless_growth(rows, workload, host)
        key = (shapes, select, weights, host)
        cache = self.by_signature.get(key)
        if cache is None:
            weight_free = not shapes or select in WEIGHT_FREE_SELECTS
            cache = self.by_signature[key] = _ClassCache(shapes) if weight_free else _Cache()
        self.by_signature.move_to_end(key)
        size = len(cache.stamp)
        cache.ensure(int(rows.max()) + 1 if len(rows) else 0)
        if len(cache.stamp) != size:
            self._evict()
        self.refresh(rows, stamps, batch.nodes, shapes, workload)
        if isinstance(cache, _ClassCache):
            return self._class_growth(cache, rows, stamps, shapes, workload, select, weights, host)
        return self._weighted_growth(cache, rows, stamps, shapes, workload, select, weights, host)

    def refresh(self, rows: np.ndarray, stamps: np.ndarray, nodes: Sequence[Any], shapes: tuple[Shape, ...],
                workload: Workload) -> None:
        """Bring the row stores the growth of ``shapes`` reads up to date on ``rows`` (``nodes[i]`` at ``rows[i]``,
        stamp ``stamps[i]``), without computing any growth: for figures read over more rows than are scored."""
        for backend in self._backends(shapes, workload):
            self._store(backend, rows, stamps, nodes)

    def free_resources(self, rows: np.ndarray, shapes: tuple[Shape, ...], workload: Workload) -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
        """Each row's free host CPU (milli; inf where unknown) and free device share (milli, summed over the
        backends :meth:`growth` read), from the row stores that call refreshed: for the ``balance`` tie-break."""
        backends = [b for b in self._backends(shapes, workload) if b in self.stores]
        if not backends:
            return np.full(len(rows), np.inf), np.zeros(len(rows))
        share = sum((self.stores[b].free[rows] for b in backends), np.zeros(len(rows)))
        return self.stores[backends[0]].host[rows, 0], share

    # ------------------------------------------------------------------------------------ no device
    def _deviceless_growth(self, rows: np.ndarray, workload: Workload, host: tuple[int, int]) -> np.ndarray:
        """The growth of a pod without devices (its CPU and memory alone) on ``rows``, whose stores are current.

        Its CPU and memory change a class's fragments only where they change whether the class fits the node, that
        is where the free CPU or memory crosses one of the classes' figures; elsewhere every class's delta is 0 and
        so is the growth, exactly (the figure :meth:`compute` gives). The other rows are computed as there: each
        a handful, whatever the pod's CPU (CPU-only pods ask many different amounts: no per-signature cache)."""
        mixes = {b: m for b, m in self._mixes((), workload).items() if len(m)}
        out = np.zeros(len(rows))
        if not mixes or not any(host):
            return out
        need = np.asarray(host, dtype=float)
        crossing = np.zeros(len(rows), dtype=bool)
        for backend, mix in mixes.items():
            free = self.stores[backend].host[rows]
            crossing |= mix.fit_ranks.ranks(free) != mix.fit_ranks.ranks(free - need)
        at = np.flatnonzero(crossing)
        if len(at):
            part = rows[at]
            out[at] = _weigh([(mix.weight, host_class_deltas(self.stores[b].state(part, mix), self.stores[b].host[part],
                                                             host, mix)) for b, mix in mixes.items()])
        return out

    # ------------------------------------------------------------------------------------ per class
    def _class_growth(self, cache: _ClassCache, rows: np.ndarray, stamps: np.ndarray, shapes: tuple[Shape, ...],
                      workload: Workload, select: str, weights: tuple[int, int, int],
                      host: tuple[int, int]) -> np.ndarray:
        mixes = self._mixes(shapes, workload)
        cols = _columns(rows)  # a slice where the batch is every row in order (gathers become views)
        new: dict[str, list[int]] = {}
        size = cache.nbytes
        if cache.version != workload.version:
            # rows cached at their current stamp keep their deltas; those of the batch get the classes new to the
            # mix (below), others are dropped (their new classes are not computed)
            outside = np.ones(len(cache.stamp), dtype=bool)
            outside[rows] = False
            cache.stamp[outside] = -1
            for backend in [b for b in cache.deltas if b not in mixes]:
                del cache.deltas[backend], cache.keys[backend], cache._laid_out[backend]
            known_bases = set(cache.base_slot)
            afresh = False
            for backend, mix in mixes.items():
                new[backend] = cache.slots(backend, mix)[1]
                if cache.single:
                    cache.bases(mix)
                # new classes come cheap only for one one-device request whose bases the cache has figures for
                afresh |= bool(new[backend]) and not (cache.single and known_bases.issuperset(
                    mix.base_keys[b] for b in mix.base[new[backend]].tolist()))
            if afresh or 2 * sum(map(len, new.values())) > sum(map(len, mixes.values())):
                # else, or when most classes are new (the online mix's class memory is a mean that moves with every
                # pod: on traces whose pods ask for varied memory most classes are new at each version), computing
                # the new classes on the cached rows costs about what computing every class afresh does
                cache.stamp[:] = -1
                new = {}
        changed = cache.stamp[rows] != stamps
        stale = rows[changed]
        where_stale = cols if len(stale) == len(rows) else stale  # a slice: plain writes instead of scattered ones
        if len(stale):  # rows changed since cached: every class, afresh
            column: dict[str, np.ndarray] | None = {} if cache.single else None
            deltas, alive, picks = self._class_deltas(stale, mixes, shapes, select, weights, host, column)
            if column:  # the per-base figures of the one request, for classes new to a later mix
                bases = cache.bases(mixes[shapes[0].backend])
                _scatter(cache.n2, bases, where_stale, column["n2"])
                _scatter(cache.s2, bases, where_stale, column["s2"])
                cache.t2[stale] = column["t2"]
            for backend, d in deltas.items():
                _scatter(cache.deltas[backend], cache.slots(backend, mixes[backend])[0], where_stale, d)
            for i, p in enumerate(picks):
                cache.picks[i][:, stale] = p
            cache.alive[stale] = alive
            cache.stamp[stale] = stamps[changed]
        if cache.version != workload.version:
            # the classes new to the mix on every row of the batch (the stale ones get the same figures again)
            for backend, classes in new.items():
                if not classes:
                    continue
                slots = cache.slots(backend, mixes[backend])[0][classes]
                fresh = self._new_class_deltas(cache, backend, mixes[backend], classes, rows, shapes[0], host)
                _scatter(cache.deltas[backend], slots, cols, fresh)
            cache.value[cols] = self._weigh(cache, mixes, cols)
            cache.version = workload.version
            if cache.nbytes > size:
                self._evict()
        elif len(stale):
            cache.value[stale] = self._weigh(cache, mixes, stale)
        return np.where(cache.alive[cols], cache.value[cols], np.inf)

    def _new_class_deltas(self, cache: _ClassCache, backend: str, mix: Mix, classes: list[int], rows: np.ndarray,
                          shape: Shape, host: tuple[int, int]) -> np.ndarray:
        """The deltas of ``mix``'s ``classes`` on ``rows``, unchanged since the cache computed the others, for its
        one one-device request, whose per-base figures the cache has for all the new classes' bases:
        :func:`column_deltas` on them (rows mixing device types: class by class, at the device the request took;
        their state comes from the store's)."""
        store = self.stores[backend]
        sub = mix.subset(classes)
        cols = _columns(rows)
        frag, row_type, mixed = store.class_rows(rows, mix, classes, cols)
        slots = np.array([cache.base_slot[k] for k in sub.base_keys], dtype=np.intp)
        host_after = store.host[cols] - np.asarray(host, dtype=float)
        out = column_deltas(sub, _gather(cache.n2, slots, cols), _gather(cache.s2, slots, cols), cache.t2[cols], frag,
                            row_type, host_after)
        if mixed.any():
            m = rows[np.flatnonzero(mixed)]
            picks = np.take(cache.picks[0], m, axis=1)
            out[:, np.flatnonzero(mixed)] = class_deltas(
                store.columns(m, picks[0]), shape, sub, host_need=host, state=store.sub_state(m, mix, sub, classes),
                picks=np.zeros_like(picks))[0]
        return out

    def _class_deltas(self, rows: np.ndarray, mixes: Mapping[str, Mix], shapes: tuple[Shape, ...], select: str,
                      weights: tuple[int, int, int], host: tuple[int, int],
                      column: dict[str, np.ndarray] | None = None,
                      ) -> tuple[dict[str, np.ndarray], np.ndarray, list[np.ndarray]]:
        """Per backend, the deltas of its mix's classes on ``rows`` (in the mix's order); where the pod can go;
        the devices each of its requests takes there. ``column``: receives the first request's per-base figures
        (:func:`class_deltas`)."""
        out = {b: np.zeros((len(mix), len(rows))) for b, mix in mixes.items()}
        alive = np.ones(len(rows), dtype=bool)
        picks = []
        if not shapes:  # no device: only its CPU and memory change what the mix can still use
            for backend, mix in mixes.items():
                store = self.stores[backend]
                out[backend] = host_class_deltas(store.state(rows, mix), store.host[rows], host, mix)
            return out, alive, picks
        for i, shape in enumerate(shapes):
            store, mix = self.stores[shape.backend], mixes[shape.backend]
            d, ok, p = class_deltas(store.view(rows), shape, mix, select=select, weights=weights,
                                    host_need=host if i == 0 else (0, 0),
                                    state=store.state(rows, mix) if len(mix) else None,
                                    column=column if i == 0 else None)
            out[shape.backend] += d
            alive &= ok
            picks.append(p)
        return out, alive, picks

    def _weigh(self, cache: _ClassCache, mixes: Mapping[str, Mix], rows: np.ndarray | slice) -> np.ndarray:
        """:func:`_weigh` of the cached deltas of ``rows``, gathered backend by backend into one reused buffer."""
        width = rows.stop - rows.start if isinstance(rows, slice) else len(rows)
        total = np.zeros(width)
        for backend, mix in mixes.items():
            d = cache.deltas[backend]
            weight = np.zeros(d.shape[0])
            weight[cache.slots(backend, mix)[0]] = mix.weight
            buf = self._scratch(d.shape[0] * width).reshape(d.shape[0], width)
            if isinstance(rows, slice):
                buf[...] = d[:, rows]
            else:
                np.take(d, rows, axis=1, out=buf)
            total += _fixed_sum(weight, buf)  # before the next backend reuses the buffer
        return _from_fixed(total)

    def _scratch(self, size: int) -> np.ndarray:
        """A reused buffer of at least ``size`` floats: fresh multi-MB arrays cost more in page faults than the
        arithmetic done in them (see :meth:`RowStore._take`). Valid until the next call."""
        if len(self._buffer) < size:
            self._buffer = np.empty(max(size, 2 * len(self._buffer)))
        return self._buffer[:size]

    # ------------------------------------------------------------------------------------ weighted (select fgd)
    def _weighted_growth(self, cache: _Cache, rows: np.ndarray, stamps: np.ndarray, shapes: tuple[Shape, ...],
                         workload: Workload, select: str, weights: tuple[int, int, int],
                         host: tuple[int, int]) -> np.ndarray:
        if cache.version != workload.version:
            cache.version = workload.version
            cache.stamp[:] = -1
        stale = np.flatnonzero(cache.stamp[rows] != stamps)
        if len(stale):
            mixes = self._mixes(shapes, workload)
            out = np.zeros(len(stale))
            limit = _memo_limit(len(cache.stamp))
            for i, shape in enumerate(shapes):
                store = self.stores[shape.backend]
                mix = mixes[shape.backend]
                need = host if i == 0 else (0, 0)

                def compute(at: np.ndarray, store: RowStore = store, mix: Mix = mix, shape: Shape = shape,
                            need: tuple[int, int] = need) -> np.ndarray:
                    if select == "fgd" and shape.nums == 1:  # the device half shared by requests alike (devmemo)
                        return single_growth(store, at, shape, mix, weights, need, self._device_memo(shape, weights))
                    return placement_delta(store.view(at), shape, mix, select=select, weights=weights,
                                           host_need=need, state=store.state(at, mix))

                # nodes alike share one computation, and so do signatures of one request: the growth is a function
                # of the row key (rowmemo)
                memo = self._row_memo(shape, weights, select)
                out += memo.growth(store, rows[stale], mix, need, compute, limit)
            cache.value[rows[stale]] = out
            cache.stamp[rows[stale]] = stamps[stale]
        return cache.value[rows]

    def _check_memos(self) -> None:
        """Together the memos hold at most a quarter of ``cache_bytes`` (checked every :data:`_MEMO_CHECK` uses:
        summing them costs), all dropped past it."""
        self._memo_uses += 1
        if self._memo_uses >= _MEMO_CHECK:
            self._memo_uses = 0
            held = sum(m.nbytes for m in self._device_memos.values()) + sum(
                m.nbytes for m in self._row_memos.values())
            if held > self.cache_bytes // 4:
                self._device_memos.clear()
                self._row_memos.clear()

    def _row_memo(self, shape: Shape, weights: tuple[int, int, int], select: str) -> RowMemo:
        """The :class:`RowMemo` of ``shape`` (under ``weights`` and ``select``), for the current mix."""
        self._check_memos()
        key = (shape.backend, shape, weights, select)
        memo = self._row_memos.get(key)
        if memo is None:
            memo = self._row_memos[key] = RowMemo()
        return memo

    def _device_memo(self, shape: Shape, weights: tuple[int, int, int]) -> DeviceMemo:
        """The :class:`DeviceMemo` of ``shape``, kept across mix versions (bounded with the row memos)."""
        self._check_memos()
        key = (shape.backend, shape, weights)
        memo = self._device_memos.get(key)
        if memo is None:
            memo = self._device_memos[key] = DeviceMemo()
        return memo

    # ------------------------------------------------------------------------------------ device order
    def device_order(self, node: Any, backend: str, shape: Shape, host: tuple[int, int], weights: tuple[int, int, int],
                     workload: Workload, ordered: Sequence[DeviceUsage]) -> list[DeviceUsage] | None:
        """:func:`~.fragmentation.fgd_device_order` of ``ordered`` (``node``'s devices of ``backend`` as they are,
        in the GPU policy's order) from the row store and the device memo the growth filled (:mod:`.devmemo`): the
        growth of every device of the node's row, its device half usually known already. None where the store
        cannot answer: a row not built at the node's current table stamp, one mixing device types, an empty mix,
        or devices the store finds usable that the fit does not."""
        usable = usable_devices(ordered, shape)
        if len(usable) <= 1:
            return order_without_choice(ordered, usable)
        store = self.stores.get(backend)
        table, row = getattr(node, "table", None), getattr(node, "row", -1)
        if (store is None or table is None or not 0 <= row < len(store.stamp) or row in table.dirty
                or store.stamp[row] != table.generation[row]):
            return None
        mix = store.mix_for(workload.version, workload.for_backend(backend))
        column = {id(d): j for j, d in enumerate(node.devices.get(backend, ()))}
        at = [column.get(id(d), -1) for d in ordered]
        if -1 in at:
            return None
        # nodes alike order alike: the order is a function of the growth's row key and of where each listed device
        # sits in the row (the memo the growth filled; the order's ties go by list position)
        memo = self._row_memos.get((backend, shape, weights, "fgd"))
        row_key = memo.key_of(store, row, mix, host) if memo is not None else None
        key = (row_key, tuple(at)) if row_key is not None else None
        if memo is not None and key is not None:
            known = memo.orders.get(key)
            if known is not None:
                return [ordered[i] for i in known]
        rows = np.array([row], dtype=np.intp)
        weighted, row_type, mixed = store.row_figures(rows, mix)
        if mixed[0] or not len(mix):
            return None
        inc, delta, _, _ = device_deltas(store, rows, shape, mix, weights, host, self._device_memo(shape, weights),
                                         weighted, row_type)
        can = inc[0].tolist()
        if sum(can) != len(usable) or not all(can[at[i]] for i in usable):
            return None
        growth = delta[0].tolist()
        result = order_by_growth(ordered, usable, [growth[j] for j in at], weights)
        if memo is not None and key is not None:
            position = {id(d): i for i, d in enumerate(ordered)}
            memo.keep_order(key, tuple(position[id(d)] for d in result), _memo_limit(len(store.stamp)))
        return result

    # ------------------------------------------------------------------------------------ shared
    def compute(self, rows: np.ndarray, stamps: np.ndarray, nodes: Sequence[Any], shapes: Sequence[Shape],
                workload: Workload, select: str, weights: tuple[int, int, int],
                host: tuple[int, int]) -> np.ndarray:
        """Growth per node (``nodes[i]`` at table row ``rows[i]``, stamp ``stamps[i]``), computed afresh; ``inf``
        where a request has no usable device. Each (container, backend) request adds its growth on its backend's
        devices; the pod's CPU and memory count against the node's, with its first request."""
        shapes = tuple(shapes)
        if not shapes and not any(host):
            return np.zeros(len(rows))
        self.refresh(rows, stamps, nodes, shapes, workload)
        mixes = self._mixes(shapes, workload)
        if shapes and select not in WEIGHT_FREE_SELECTS:
            return self._weighted_growth(_sized(_Cache(), rows), rows, stamps, shapes, workload, select, weights,
                                         host)
        deltas, alive, _ = self._class_deltas(rows, mixes, shapes, select, weights, host)
        growth = _weigh([(mix.weight, deltas[b]) for b, mix in mixes.items()])
        return np.where(alive, growth, np.inf)

    @staticmethod
    def _backends(shapes: tuple[Shape, ...], workload: Workload) -> list[str]:
        """The backends whose devices the growth reads: the pod's, or (no device) every backend of the mix."""
        if shapes:
            return list(dict.fromkeys(s.backend for s in shapes))
        return workload.backends

    def _mixes(self, shapes: tuple[Shape, ...], workload: Workload) -> dict[str, Mix]:
        return {b: self.stores[b].mix_for(workload.version, workload.for_backend(b))
                for b in self._backends(shapes, workload)}

    def _store(self, backend: str, rows: np.ndarray, stamps: np.ndarray, nodes: Sequence[Any]) -> RowStore:
        store = self.stores.get(backend)
        if store is None:
            store = self.stores[backend] = RowStore(backend)
        store.refresh(rows, stamps, nodes)
        return store

    def _evict(self) -> None:
        """Drop least recently used signatures while the caches hold more than ``cache_bytes`` (never the last)."""
        total = sum(c.nbytes for c in self.by_signature.values())
        while total > self.cache_bytes and len(self.by_signature) > 1:
            _, dropped = self.by_signature.popitem(last=False)
            total -= dropped.nbytes


def _sized(cache: _Cache, rows: np.ndarray) -> _Cache:
    cache.ensure(int(rows.max()) + 1 if len(rows) else 0)
    return cache


def node_growth(nodes: Sequence[Any], shapes: Sequence[Shape], workload: Workload, select: str,
                weights: tuple[int, int, int] = (1, 1, 1), host: tuple[int, int] = (0, 0)) -> np.ndarray:
    """Fragmentation growth (milli) of each node if the pod with ``shapes`` is placed there, computed
    from scratch (no engine caches); see :meth:`FgdState.compute`."""
    rows = np.arange(len(nodes), dtype=np.intp)
    return FgdState().compute(rows, rows.astype(np.int64) + 1, nodes, shapes, workload, select, weights, host)
