"""Per-node numeric summaries in numpy arrays, so a decision can rank and prefilter every node at once.

Rows are refreshed lazily: a node whose usage or devices change is marked dirty and its row is
recomputed (from at most a handful of devices) the next time a decision reads the table.

The table also indexes the candidate set a decision starts from, so that a decision costs no Python
work per node: ``index`` maps a node name to its row, ``ok`` says whether a row can take pods
(registered devices, not quarantined), and ``rank`` is the row's position in name order, kept for
the name-order tie-break without sorting names per decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np

from hami_core.engine.inventory import NodeState
from hami_core.engine.vecfit import DeviceGrid
from hami_core.plugins.types import DeviceRequest

#: Columns of :attr:`NodeTable.totals` (node-wide sums over every device, as HAMi's node score uses them).
USED, COUNT, USEDCORES, TOTALCORE, USEDMEM, TOTALMEM = range(6)
#: Columns of a backend's capacity summary: devices with a free slot, the largest free cores and free memory
#: among them, and devices that could take an exclusive (100-core) request.
NFREE, MAXCORES, MAXMEM, NIDLE = range(4)


class NodeTable:
    """Node rows: ``totals`` (node-wide usage sums) and, per backend, a capacity summary for prefiltering."""

    def __init__(self, capacity: int = 64) -> None:
        self.states: list[NodeState | None] = [None] * capacity
        self.totals = np.zeros((capacity, 6))
        #: A stamp per row, new (never reused, even across nodes) whenever the row changes; -1 for a free
        #: row. A value cached at ``(row, stamp)`` stays valid while the stamp matches.
        self.generation = np.full(capacity, -1, dtype=np.int64)
        self._stamp = 0
        self.capacity: dict[str, np.ndarray] = {}
        self._free_rows: list[int] = list(range(capacity - 1, -1, -1))
        self.dirty: set[int] = set()
        #: node name → row
        self.index: dict[str, int] = {}
        #: row → the node can take pods (registered, not quarantined); False for free rows
        self.ok = np.zeros(capacity, dtype=bool)
        #: row → position of the node's name among all node names (valid after :meth:`refresh`)
        self.rank = np.zeros(capacity, dtype=np.intp)
        #: name rank → row
        self.by_rank = np.zeros(0, dtype=np.intp)
        #: bumped whenever membership, name order or an ``ok`` flag changes (keys the caches below)
        self.version = 0
        self._ranks_stale = False
        # Every ok row in name order, with its states (the candidate set when a decision names every node).
        self._all: tuple[int, np.ndarray, list[NodeState]] | None = None
        #: backend → its devices on every row, for the vectorised fit (built on first use, then kept current)
        self.grids: dict[str, DeviceGrid] = {}
        # annotation key → row → the node has that annotation (built on first use); rows whose annotations changed
        self._annotated: dict[str, np.ndarray] = {}
        self.annotations_dirty: set[int] = set()
        # (table version, a candidate list, its rows): rows() of the list a decision was given again
        self._rows_memo: tuple[int, list[NodeState], np.ndarray] | None = None

    def add(self, state: NodeState) -> None:
        if not self._free_rows:
            self._grow()
        row = self._free_rows.pop()
        self.states[row] = state
        state.row = row
        state.table = self
        self.index[state.name] = row
        self.dirty.add(row)
        self.annotations_dirty.add(row)
        self._ranks_stale = True
        self.version += 1

    def remove(self, state: NodeState) -> None:
        row = state.row
        if row < 0 or self.states[row] is not state:
            return
        self.states[row] = None
        self.index.pop(state.name, None)
        self.ok[row] = False
        self._ranks_stale = True
        self.version += 1
        self.totals[row] = 0
        self.generation[row] = -1
        for arr in self.capacity.values():
            arr[row] = 0
        for grid in self.grids.values():
            grid.clear(row)
        for flags in self._annotated.values():
            flags[row] = False
        self.dirty.discard(row)
        self.annotations_dirty.discard(row)
        self._free_rows.append(row)
        state.row = -1
        state.table = None

    def _grow(self) -> None:
        old = len(self.states)
        new = old * 2
        self.states.extend([None] * (new - old))
        self.totals = np.vstack([self.totals, np.zeros((new - old, 6))])
        self.generation = np.concatenate([self.generation, np.full(new - old, -1, dtype=np.int64)])
        self.ok = np.concatenate([self.ok, np.zeros(new - old, dtype=bool)])
        self.rank = np.concatenate([self.rank, np.zeros(new - old, dtype=np.intp)])
        for backend, arr in self.capacity.items():
            self.capacity[backend] = np.vstack([arr, np.zeros((new - old, 4))])
        for grid in self.grids.values():
            grid.grow(new)
        for key, flags in self._annotated.items():
            self._annotated[key] = np.concatenate([flags, np.zeros(new - old, dtype=bool)])
        self._free_rows.extend(range(new - 1, old - 1, -1))

    def refresh(self) -> None:
        """Recompute every dirty row (and the name order after nodes came or went)."""
        if self._ranks_stale:
            self._rerank()
        ok = self.ok
        for row in self.dirty:
            state = self.states[row]
            if state is None:
                continue
            self._stamp += 1
            self.generation[row] = self._stamp
            can = bool(state.by_uuid) and not state.quarantine
            if ok[row] != can:
                ok[row] = can
                self.version += 1
            self.totals[row] = (state.sum_used, state.tot_count, state.sum_usedcores, state.tot_core,
                                state.sum_usedmem, state.tot_mem)
            for backend, arr in self.capacity.items():
                if backend not in state.devices:
                    arr[row] = 0
            for backend, devs in state.devices.items():
                arr = self.capacity.get(backend)
                if arr is None:
                    arr = self.capacity[backend] = np.zeros((len(self.states), 4))
                nfree = nidle = 0
                maxcores = maxmem = 0
                # a MIG GPU may host up to count - used instances of one request (spec §6.6 step 16)
                mig = backend in state.mig
                for d in devs:
                    if not d.health or d.used >= d.count:
                        continue
                    room = d.count - d.used if mig and d.mode == "mig" else 1
                    nfree += room
                    maxcores = max(maxcores, d.totalcore - d.usedcores)
                    maxmem = max(maxmem, d.totalmem - d.usedmem)
                    if d.used == 0 or d.totalcore != 100:
                        nidle += room
                arr[row] = (nfree, maxcores, maxmem, nidle)
            for backend, grid in self.grids.items():
                grid.set_row(row, state.devices.get(backend, ()), backend in state.mig)
        self.dirty.clear()

    def _rerank(self) -> None:
        names = sorted(self.index)
        self.by_rank = np.fromiter(map(self.index.__getitem__, names), dtype=np.intp, count=len(names))
        self.rank[self.by_rank] = np.arange(len(names), dtype=np.intp)
        self._ranks_stale = False
        self.version += 1

    def rows(self, states: Iterable[NodeState]) -> np.ndarray:
        return np.fromiter((s.row for s in states), dtype=np.intp)

    def rows_of(self, states: list[NodeState]) -> np.ndarray:
        """:meth:`rows` of a candidate list, without a pass over it when it is :meth:`every_ok`'s list or the
        list last asked about (a decision's candidate lists are cached and handed out again)."""
        cached = self._all
        if cached is not None and states is cached[2] and cached[0] == self.version:
            return cached[1]
        memo = self._rows_memo
        if memo is not None and memo[1] is states and memo[0] == self.version and len(memo[2]) == len(states):
            return memo[2]
        rows = self.rows(states)
        self._rows_memo = (self.version, states, rows)
        return rows

    def grid(self, backend: str) -> DeviceGrid:
        """``backend``'s devices on every row (call :meth:`refresh` first); built on first use, kept current by
        :meth:`refresh` from then on."""
        grid = self.grids.get(backend)
        if grid is None:
            grid = self.grids[backend] = DeviceGrid(backend, len(self.states))
            for row, state in enumerate(self.states):
                if state is not None:
                    grid.set_row(row, state.devices.get(backend, ()), backend in state.mig)
        return grid

    def annotated(self, key: str) -> np.ndarray:
        """Row → the node carries annotation ``key`` (with a non-empty value); built on first use."""
        flags = self._annotated.get(key)
        if flags is None:
            flags = self._annotated[key] = np.zeros(len(self.states), dtype=bool)
            for row, state in enumerate(self.states):
                if state is not None:
                    flags[row] = bool(state.annotations.get(key))
        if self.annotations_dirty:
            for row in self.annotations_dirty:
                state = self.states[row]
                for name, values in self._annotated.items():
                    values[row] = state is not None and bool(state.annotations.get(name))
            self.annotations_dirty.clear()
        return flags

    def every_ok(self) -> tuple[np.ndarray, list[NodeState]]:
        """Rows of every node that can take pods, in name order, and their states (cached; call refresh first).

        The list is shared between decisions: callers must not modify it.
        """
        cached = self._all
        if cached is None or cached[0] != self.version:
            rows = self.by_rank[self.ok[self.by_rank]]
            states = self.states
            cached = self._all = (self.version, rows, [states[r] for r in rows.tolist()])  # type: ignore[misc]
        return cached[1], cached[2]

    def lookup(self, names: Sequence[str]) -> np.ndarray:
        """Row of every name (-1 for an unknown one), in the order given."""
        return np.fromiter(map(self.index.get, names, repeat(-1)), dtype=np.intp, count=len(names))

    def feasible(self, rows: np.ndarray, backend: str, request: DeviceRequest) -> np.ndarray:
        """Boolean mask over ``rows``: nodes that *might* fit ``request`` (never excludes one that fits).

        Valid for backends that declare ``standard_capacity`` (their fit honours slots, cores, memory
        and exclusive cards as HAMi's standard fit does).
        """
        arr = self.capacity.get(backend)
        if arr is None:
            return np.zeros(len(rows), dtype=bool)
        sub = arr[rows]
        cores = min(request.coresreq, 100)
        mask = (sub[:, NFREE] >= request.nums) & (sub[:, MAXCORES] >= cores)
        if request.memreq > 0:
            mask &= sub[:, MAXMEM] >= request.memreq
        if cores >= 100:
            mask &= sub[:, NIDLE] >= request.nums
        return mask
