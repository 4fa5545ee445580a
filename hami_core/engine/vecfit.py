"""HAMi's standard fit over every candidate node at once, from per-backend numeric device arrays.

:func:`~hami_core.plugins.fit.standard_fit` walks one node's devices in Python; an embedding scheduler that wants
every node's verdict pays that walk for each of thousands of nodes. For a backend whose fit is the plain
standard checklist (:meth:`StandardBackend.vector_fit_options <hami_core.plugins.standard.StandardBackend
.vector_fit_options>` says when) the same verdicts follow from array operations:

* without a quota, a custom rule, NUMA grouping, topology or revisits, whether a device passes the checklist does
  not depend on the devices chosen before it, so each device gets its first failing check at once;
* a node fits when at least ``nums`` devices pass; the chosen ones are the first ``nums`` passing devices in
  walk order (the GPU policy's order, preferred last, walked from the end);
* a node that does not fit examined every device, so its reason counts are per-check totals (HAMi sorts the
  reason items, so the walk order does not show in the text).

:class:`DeviceGrid` holds one backend's devices for every table row (kept by
:class:`~hami_core.engine.table.NodeTable`, rebuilt only where a row changed), :func:`device_order` the GPU
policy's device order per row (cached per row stamp when the request cannot change it), :func:`fit_rows` the
verdicts. Values are exact integers, and the device score is computed with the operations of
:func:`~hami_core.engine.policy.device_score` in the same order, so orders and verdicts equal the per-node path's;
a row holding a value too large for that (:data:`EXACT_LIMIT`) is left to the per-node path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, ContainerDevice, DeviceRequest, DeviceUsage, GpuPolicy
from hami_core.wire.reasons import Reason

__all__ = ["EXACT_LIMIT", "DeviceGrid", "VectorVerdicts", "device_order", "fit_rows", "plain_filter"]

#: Fields of :attr:`DeviceGrid.vals`, one ``(rows, width)`` int64 plane each.
HEALTH, USED, COUNT, USEDCORES, TOTALCORE, USEDMEM, TOTALMEM, NUMA, INDEX = range(9)
_FIELDS = 9
#: A row with a device value at or beyond this magnitude is fitted per node: products and sums of the device
#: score then stay below 2**53, where float64 holds every integer (and ``int / int`` rounds as Python does).
EXACT_LIMIT = 1 << 40
#: Device-score weights at or beyond this magnitude send the whole request to the per-node path (same reason).
_WEIGHT_LIMIT = 1 << 12
_CHAIN_TOKENS = ("binpack", "spread", "numa")
#: HAMi's own GPU policy tokens: the orders :func:`_sort_keys` knows. Another token belongs to a policy package
#: that starts from an order of its own choosing and may refine it per node (``hami_order_devices``).
_HAMI_TOKENS = frozenset({"binpack", "spread", "numa", "mutex", "topology-aware"})
#: Reason of each failure code of :func:`fit_rows` (index = code; 0 = the device passes), in checklist order. The
#: mutex conflict (3) and the exclusive-card conflict (6) share HAMi's reason, and so its count.
_REASONS = (None, Reason.CardNotHealth, Reason.CardTimeSlicingExhausted, Reason.ExclusiveDeviceAllocateConflict,
            Reason.CardInsufficientMemory, Reason.CardInsufficientCore, Reason.ExclusiveDeviceAllocateConflict,
            Reason.CardComputeUnitsExhausted)
_CODES = [np.int8(c) for c in range(1, len(_REASONS))]
#: Device orders kept per backend (one per GPU policy and weights, the least recently used dropped first).
_ORDERS_KEPT = 16


class DeviceGrid:
    """One backend's devices on every table row: ``vals[field, row, j]`` is device ``j`` (registration order).

    ``n[row]`` counts the row's devices (``j >= n`` is padding), ``mig[row]`` says the backend has a MIG-mode
    device there and ``exact[row]`` that the row must be fitted per node (MIG, or a value beyond
    :data:`EXACT_LIMIT`). ``orders`` caches :func:`device_order` results per policy key.
    """

    def __init__(self, backend: str, capacity: int) -> None:
        self.backend = backend
        self.width = 1
        self.n = np.zeros(capacity, dtype=np.intp)
        self.mig = np.zeros(capacity, dtype=bool)
        self.exact = np.zeros(capacity, dtype=bool)
        self.vals = np.zeros((_FIELDS, capacity, 1), dtype=np.int64)
        self.type_idx = np.full((capacity, 1), -1, dtype=np.intp)
        #: device type → its number in :attr:`type_idx`
        self.types: dict[str, int] = {}
        #: policy key → (device order per row, the row stamp each row's order was computed at)
        self.orders: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}

    @property
    def capacity(self) -> int:
        return len(self.n)

    def grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        if extra <= 0:
            return
        self.n = np.concatenate([self.n, np.zeros(extra, dtype=np.intp)])
        self.mig = np.concatenate([self.mig, np.zeros(extra, dtype=bool)])
        self.exact = np.concatenate([self.exact, np.zeros(extra, dtype=bool)])
        self.vals = np.concatenate([self.vals, np.zeros((_FIELDS, extra, self.width), dtype=np.int64)], axis=1)
        self.type_idx = np.concatenate([self.type_idx, np.full((extra, self.width), -1, dtype=np.intp)])
        for key, (place, stamp) in list(self.orders.items()):
            self.orders[key] = (np.concatenate([place, np.zeros((extra, self.width), dtype=np.intp)]),
                                np.concatenate([stamp, np.full(extra, -1, dtype=np.int64)]))

    def _widen(self, width: int) -> None:
        extra = width - self.width
        rows = self.capacity
        self.vals = np.concatenate([self.vals, np.zeros((_FIELDS, rows, extra), dtype=np.int64)], axis=2)
        self.type_idx = np.concatenate([self.type_idx, np.full((rows, extra), -1, dtype=np.intp)], axis=1)
        self.width = width
        self.orders.clear()  # orders are per width

    def clear(self, row: int) -> None:
        self.n[row] = 0
        self.mig[row] = False
        self.exact[row] = False
        self.vals[:, row] = 0
        self.type_idx[row] = -1

    def set_row(self, row: int, devices: Sequence[DeviceUsage], mig: bool) -> None:
        """Copy one row's devices (the table calls it for every row that changed)."""
        count = len(devices)
        if count > self.width:
            self._widen(count)
        self.clear(row)
        self.n[row] = count
        self.mig[row] = mig
        if not count:
            return
        values = [(d.health, d.used, d.count, d.usedcores, d.totalcore, d.usedmem, d.totalmem, d.numa, d.index)
                  for d in devices]
        block = np.array(values)
        if block.dtype.kind not in "biu":  # a float, None or an integer beyond int64: the per-node path copes
            self.exact[row] = True
            return
        self.exact[row] = mig or bool(np.abs(block).max() >= EXACT_LIMIT)
        self.vals[:, row, :count] = block.T
        types = self.types
        for j, d in enumerate(devices):
            idx = types.get(d.type)
            if idx is None:
                idx = types[d.type] = len(types)
            self.type_idx[row, j] = idx

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``vals`` of ``rows``: a ``(fields, len(rows), width)`` array."""
        return np.take(self.vals, rows, axis=1)


# ------------------------------------------------------------------------------------------ device order
def orderable(policy: GpuPolicy) -> bool:
    """Whether :func:`device_order` reproduces :func:`~hami_core.engine.policy.sort_devices` for ``policy``."""
    if policy.numa_bind:  # NUMA binding also changes the fit (grouping by NUMA node): per node
        return False
    return all(t in _HAMI_TOKENS for t in policy.gpu_tokens) and all(abs(w) < _WEIGHT_LIMIT for w in policy.weights)


def _scores(v: np.ndarray, type_idx: np.ndarray, types: Mapping[str, int], requests: Iterable[DeviceRequest],
            weights: tuple[int, int, int]) -> np.ndarray:
    """:func:`~hami_core.engine.policy.device_score` of every device: the same integer sums, the same float
    operations in the same order."""
    used, count, usedcores = v[USED], v[COUNT], v[USEDCORES]
    totalcore, totalmem, usedmem = v[TOTALCORE], v[TOTALMEM], v[USEDMEM]
    req = core = mem = 0
    for r in requests:
        tid = types.get(r.backend)
        if tid is None:
            continue  # no device has a type equal to this request's backend: it counts nowhere
        on = type_idx == tid
        pct = r.mem_percentage
        req = req + on
        core = core + on * r.coresreq
        mem = mem + on * (totalmem * pct // 100 if pct not in (0, MEM_PERCENTAGE_UNSET) else r.memreq)
    ws, wc, wm = weights
    valid = (count != 0) & (totalcore != 0) & (totalmem != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 10.0 * (ws * (req + used) / count + wc * (core + usedcores) / totalcore
                        + wm * (mem + usedmem) / totalmem)
    return np.where(valid, score, 0.0)


def _sort_keys(v: np.ndarray, score: np.ndarray, policy: GpuPolicy, width: int) -> list[np.ndarray]:
    """:func:`~hami_core.engine.policy.sort_devices`'s sort key, most significant first, ending with the device's
    registration position (Python's sort is stable)."""
    numa = v[NUMA]
    position = np.broadcast_to(np.arange(width), numa.shape)
    if "," in policy.gpu or policy.gpu == "numa":
        chain = [t for t in dict.fromkeys(policy.gpu_tokens) if t in _CHAIN_TOKENS] or ["spread"]
        parts = [score if t == "binpack" else -score if t == "spread" else numa for t in chain]
        return [*parts, v[INDEX], position]
    if policy.gpu == "mutex":
        return [-v[USED], numa, position]
    if policy.gpu == "binpack":
        return [score, numa, position]
    return [-score, numa, position]


def _order(grid: DeviceGrid, rows: np.ndarray, policy: GpuPolicy, requests: Sequence[DeviceRequest]) -> np.ndarray:
    """Each device's place in the policy's order of its row (``(len(rows), width)``; the preferred device has the
    highest; padding places anywhere)."""
    width = grid.width
    if not len(rows):
        return np.zeros((0, width), dtype=np.intp)
    v = grid.take(rows)
    score = _scores(v, grid.type_idx[rows], grid.types, requests, policy.weights)
    keys = _sort_keys(v, score, policy, width)
    row_key = np.broadcast_to(np.arange(len(rows))[:, None], score.shape)
    # lexsort sorts by its last key first: the row, then the policy's key from the most significant part
    flat = np.lexsort([k.ravel() for k in reversed(keys)] + [row_key.ravel()])
    order = (flat % width).reshape(len(rows), width)  # registration positions in the policy's order
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.broadcast_to(np.arange(width), order.shape), axis=1)
    return place


def device_order(grid: DeviceGrid, rows: np.ndarray, stamps: np.ndarray, policy: GpuPolicy,
                 requests: Sequence[DeviceRequest]) -> np.ndarray:
    """Each device's place in the order :func:`~hami_core.engine.policy.sort_devices` gives the devices of its row
    under ``policy`` for a container with ``requests`` (``(len(rows), width)``; the fit walks from the highest).

    Cached per row at ``stamps`` (the rows' table stamps), unless a request's backend equals a device type:
    then the request is part of the score (HAMi quirk §12.1.2) and the order is computed afresh.
    """
    if any(r.backend in grid.types for r in requests):
        return _order(grid, rows, policy, requests)
    key = (policy.gpu, policy.gpu_tokens, policy.weights)
    cached = grid.orders.pop(key, None)
    if cached is None:
        if len(grid.orders) >= _ORDERS_KEPT:  # pods may name any weights: keep the policies used last
            del grid.orders[next(iter(grid.orders))]
        cached = (np.zeros((grid.capacity, grid.width), dtype=np.intp), np.full(grid.capacity, -1, dtype=np.int64))
    grid.orders[key] = cached  # most recently used last
    place, stamp = cached
    changed = stamp[rows] != stamps
    if changed.any():
        stale = rows[changed]
        place[stale] = _order(grid, stale, policy, ())
        stamp[stale] = stamps[changed]
    return place[rows]


# ------------------------------------------------------------------------------------------ fit
class VectorVerdicts:
    """:func:`fit_rows`'s answer for ``rows``: ``ok[i]`` whether row ``rows[i]`` fits; for the rows that fit, in
    order, ``chosen`` holds the registration positions of the devices the per-node fit would choose (a
    ``(fits, nums)`` array, in the order chosen); ``reasons`` the reason text of each row that does not fit,
    in order."""

    __slots__ = ("chosen", "ok", "reasons")

    def __init__(self, ok: np.ndarray, chosen: np.ndarray, reasons: list[str]) -> None:
        self.ok = ok
        self.chosen = chosen
        self.reasons = reasons


def _memory(request: DeviceRequest, totalmem: np.ndarray) -> np.ndarray | int:
    """:func:`~hami_core.plugins.fit.memory_to_book` of every device."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentage != MEM_PERCENTAGE_UNSET:
        return totalmem * request.mem_percentage // 100
    return 0


def fit_rows(grid: DeviceGrid, rows: np.ndarray, order: np.ndarray, request: DeviceRequest, *,
             mutex: bool = False) -> VectorVerdicts:
    """HAMi's standard checklist (:func:`~hami_core.plugins.fit.standard_fit` without type or UUID selection,
    cordon, NUMA binding, topology, quota, custom rule or revisit) on every device of ``rows`` at once.

    ``order``: :func:`device_order` of ``rows`` (each device's place in its row's walk, highest first). Every row
    must have at least ``request.nums >= 1`` devices (the engine's device-count pre-check runs first).
    """
    v = grid.take(rows)
    used, count, usedcores, totalcore = v[USED], v[COUNT], v[USEDCORES], v[TOTALCORE]
    usedmem, totalmem = v[USEDMEM], v[TOTALMEM]
    width = grid.width
    present = np.arange(width) < grid.n[rows][:, None]
    cores = min(request.coresreq, 100)
    mem = _memory(request, totalmem)
    busy = used > 0
    # The checks in the checklist's order; np.select keeps the first that holds.
    conditions = [v[HEALTH] == 0, count <= used, busy if mutex else np.zeros_like(busy),
                  totalmem - usedmem < mem, totalcore - usedcores < cores,
                  (totalcore == 100) & busy if cores == 100 else np.zeros_like(busy),
                  (totalcore != 0) & (usedcores == totalcore) if cores == 0 else np.zeros_like(busy)]
    code = np.select(conditions, _CODES, default=0)
    passing = present & (code == 0)
    npass = np.count_nonzero(passing, axis=1)
    nums = request.nums
    ok = npass >= nums
    # The walk takes passing devices from the highest place down: the first ``nums`` of them, in that order.
    preference = np.where(passing, order, -1)
    if nums == 1:
        chosen = preference.argmax(axis=1)[:, None]
        if not ok.all():
            chosen = chosen[ok]
    else:
        chosen = np.argsort(preference[ok], axis=1)[:, ::-1][:, :nums]
    reasons = _reasons(code[~ok], present[~ok], npass[~ok], grid.n[rows][~ok], width) if not ok.all() else []
    return VectorVerdicts(ok, chosen, reasons)


def _reasons(code: np.ndarray, present: np.ndarray, npass: np.ndarray, total: np.ndarray, width: int) -> list[str]:
    """The reason text of each failing row: HAMi's sorted ``"<c>/<total> <Reason>"`` items, computed once per
    distinct set of counts (a cluster's failing nodes mostly share a few)."""
    if not len(code):
        return []
    counts = np.stack([((code == c) & present).sum(axis=1) for c in range(1, len(_REASONS))]
                      + [npass, total], axis=1)
    base = width + 1
    if base ** counts.shape[1] < 1 << 62:  # pack each row into one integer: unique() on a vector is fast
        packed = np.zeros(len(counts), dtype=np.int64)
        for column in counts.T:
            packed = packed * base + column
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(counts, axis=0, return_index=True, return_inverse=True)
    texts = [_reason_text(counts[i].tolist()) for i in first.tolist()]
    return [texts[i] for i in inverse.ravel().tolist()]


def _reason_text(counts: list[int]) -> str:
    *per_check, npass, total = counts
    named: dict[str, int] = {}
    for code, c in enumerate(per_check, start=1):
        if c:
            reason = _REASONS[code]
            assert reason is not None
            named[reason] = named.get(reason, 0) + c
    if npass:
        named[Reason.AllocatedCardsInsufficientRequest] = npass
    return ", ".join(sorted(f"{c}/{total} {reason}" for reason, c in named.items()))


def chosen_devices(devices: Sequence[DeviceUsage], positions: Iterable[int],
                   request: DeviceRequest) -> tuple[ContainerDevice, ...]:
    """The :class:`ContainerDevice` tuple the per-node fit would return for the devices at ``positions``."""
    cores = min(request.coresreq, 100)
    out = []
    for j in positions:
        d = devices[j]
        if request.memreq > 0:
            mem = request.memreq
        elif request.mem_percentage != MEM_PERCENTAGE_UNSET:
            mem = d.totalmem * request.mem_percentage // 100
        else:
            mem = 0
        out.append(ContainerDevice(d.id, request.backend, mem, cores, d.index))
    return tuple(out)


# ------------------------------------------------------------------------------------------ hooks
def plain_filter(hook: Any, backend: Any) -> bool:
    """Whether ``hami_filter_nodes`` for ``backend`` would run the backend's own method alone: no cross-cutting
    plugin wraps it and nothing watches hook calls (the test kit's recorder, ``HAMI_TRACE_PLUGINS``), so
    answering without the call changes nothing anyone can see."""
    relay_of = getattr(hook, "relay", None)
    pm = getattr(hook, "_pm", None)
    if relay_of is None or pm is None:
        return False
    try:
        from pluggy._callers import _multicall  # pluggy's executor; monitoring replaces it
    except ImportError:  # another pluggy: cannot tell, so keep the hook call
        return False
    if getattr(pm, "_inner_hookexec", None) is not _multicall:
        return False
    impls = relay_of(backend).hami_filter_nodes.get_hookimpls()
    return len(impls) == 1 and impls[0].plugin is backend
