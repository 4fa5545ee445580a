"""Device arrays and mix state for node-table rows, kept across decisions and rebuilt only where a row changed.

Building :class:`~hami_core.policies.fgd.fragmentation.DeviceArrays` walks every device in Python and the
:class:`~hami_core.policies.fgd.fragmentation.MixState` costs ``classes x devices`` per row; a fragmentation
policy needs both for every candidate node on every decision. A :class:`RowStore` keeps them per table
row, valid while the row's table stamp (``NodeBatch.generations``) and the mix are unchanged, so a
decision after one placement rebuilds one row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, MixState, free_share_of
from hami_core.policies.fgd.mix import MixClass

_FIELDS = 7  # health, used, count, usedcores, totalcore, usedmem, totalmem
#: Distinct device states a store numbers before it starts its numbering afresh (:attr:`RowStore.epoch`).
_MAX_DEVICE_IDS = 200_000
#: Stale rows from which :meth:`RowStore._rebuild` computes the device figures once per device state.
_DEDUP_ROWS = 32


class RowStore:
    """One backend's devices for every table row seen so far."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.types: dict[str, int] = {}
        self.width = 1
        self.stamp = np.full(0, -1, dtype=np.int64)
        self.arr = np.zeros((_FIELDS, 0, 1))
        self.type_idx = np.full((0, 1), -1, dtype=np.intp)
        self.order = np.zeros((0, 1))
        self.host = np.zeros((0, 2))
        #: Each row's free device share (milli, summed over its devices), kept with the row.
        self.free = np.zeros(0)
        #: Each row's device state as a number: rows with equal numbers have bit-for-bit equal devices (``arr``,
        #: ``type_idx`` and ``order``), so a memo keyed by node state compares one integer instead of the devices.
        #: Numbers are valid within one :attr:`epoch` (a new one starts when the width changes or too many states
        #: were numbered).
        self.device_id = np.full(0, -1, dtype=np.int64)
        self.epoch = 0
        self._device_ids: dict[bytes, int] = {}
        self._mix_key: tuple[Any, ...] | None = None
        self.mix: Mix | None = None
        self._state_stamp = np.full(0, -1, dtype=np.int64)
        self._state: MixState | None = None
        self._buffers: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------------------------ devices
    def refresh(self, rows: np.ndarray, stamps: np.ndarray, nodes: Sequence[Any]) -> None:
        """Rebuild the rows whose stamp changed (``nodes[i]`` is the node at ``rows[i]``)."""
        self._ensure(int(rows.max()) + 1 if len(rows) else 0)
        epoch = self.epoch
        for i in np.flatnonzero(self.stamp[rows] != stamps):
            self._build(int(rows[i]), nodes[int(i)])
            self.stamp[rows[i]] = stamps[i]
        if self.epoch != epoch:
            # a wider node moved every row's tie-break positions, or the device numbering started afresh: rebuild
            # the batch (rows built before it have no number in the new one)
            self.refresh(rows, stamps, nodes)

    def _build(self, row: int, node: Any) -> None:
        devs = node.devices.get(self.backend, ())
        if len(devs) > self.width:
            self._widen(len(devs))
        self.arr[:, row] = 0
        self.type_idx[row] = -1
        self.order[row] = 0
        for j, d in enumerate(devs):
            self.arr[:, row, j] = (d.health, d.used, d.count, d.usedcores, d.totalcore, d.usedmem, d.totalmem)
            idx = self.types.get(d.type)
            if idx is None:
                idx = self.types[d.type] = len(self.types)
            self.type_idx[row, j] = idx
            self.order[row, j] = (min(max(d.numa, -1), 1022) + 1) * self.width + j
        total = getattr(node, "host_total", (np.inf, np.inf))
        used = getattr(node, "host_used", (0, 0))
        self.host[row] = (total[0] - used[0], total[1] - used[1])
        a = self.arr[:, row]
        self.free[row] = free_share_of(a[0] > 0, a[3], a[4], a[5], a[6]).sum()
        if len(self._device_ids) >= _MAX_DEVICE_IDS:
            self._renumber()
        key = self.arr[:, row].tobytes() + self.type_idx[row].tobytes() + self.order[row].tobytes()
        self.device_id[row] = self._device_ids.setdefault(key, len(self._device_ids))

    def _renumber(self) -> None:
        """Start the device numbering afresh: every row gets its number again when next rebuilt."""
        self._device_ids.clear()
        self.epoch += 1
        self.stamp[:] = -1
        self.device_id[:] = -1

    def view(self, rows: np.ndarray) -> DeviceArrays:
        a = np.take(self.arr, rows, axis=1)  # several times faster than ``self.arr[:, rows]``
        return DeviceArrays(a[0] > 0, a[1], a[2], a[3], a[4], a[5], a[6], self.type_idx[rows], self.order[rows],
                            self.host[rows])

    def columns(self, rows: np.ndarray, columns: np.ndarray) -> DeviceArrays:
        """Device ``columns[i]`` of each row ``rows[i]`` alone, ``(rows, 1)`` arrays: cheaper than a :meth:`view`
        when only the device a pod takes matters."""
        flat = rows * self.width + columns  # one flat gather per field: faster than ``arr[:, rows, columns]``
        a = np.take(self.arr.reshape(_FIELDS, -1), flat, axis=1)[:, :, None]
        return DeviceArrays(a[0] > 0, a[1], a[2], a[3], a[4], a[5], a[6], np.take(self.type_idx, flat)[:, None],
                            np.take(self.order, flat)[:, None], self.host[rows])

    def type_list(self) -> list[str]:
        return sorted(self.types, key=self.types.__getitem__)

    # ------------------------------------------------------------------------------------ mix state
    def mix_for(self, version: int, classes: Sequence[MixClass]) -> Mix:
        """The mix over this store's types (rebuilt when the mix or the known types change). The rows' state is
        kept across versions whose classes (:attr:`Mix.keys`) are unchanged: only their weights moved."""
        key = (version, len(self.types))
        if self._mix_key != key or self.mix is None:
            self._mix_key = key
            mix = Mix(classes, self.type_list())
            if self.mix is not None and self._state is not None and mix.keys == self.mix.keys \
                    and mix.types == self.mix.types:
                # only the weights moved: the rows' state depends on the classes alone, bar its weighted sum
                self._state.weighted[:] = mix.weight @ self._state.frag
            else:
                self._state_stamp[:] = -1
                self._state = None
            self.mix = mix
        return self.mix

    def state(self, rows: np.ndarray, mix: Mix) -> MixState:
        """The rows' :class:`MixState` under ``mix`` (the one :meth:`mix_for` returned), rebuilt where stale."""
        self._rebuild(rows, mix)
        return self._take(rows)

    def row_figures(self, rows: np.ndarray, mix: Mix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of the rows' state under ``mix`` (the one :meth:`mix_for` returned): ``weighted``, ``row_type`` and
        ``mixed`` alone (what a one-device request's growth reads besides its device figures, :mod:`.devmemo`):
        three gathers instead of :meth:`state`'s nine."""
        self._rebuild(rows, mix)
        st = self._state
        if st is None:
            raise RuntimeError("RowStore.row_figures before the state was built")
        return np.take(st.weighted, rows), np.take(st.row_type, rows), np.take(st.mixed, rows)

    def sub_state(self, rows: np.ndarray, mix: Mix, sub: Mix, classes: list[int],
                  cols: slice | None = None) -> MixState:
        """The rows' state under ``sub``, the :meth:`Mix.subset` of ``classes`` of ``mix`` (the one :meth:`mix_for`
        returned): gathers only those classes (and their bases). ``cols``: ``rows`` as a slice, where they are
        ``0..n-1`` in order (views instead of gathers)."""
        if sub.parent_bases is None:
            raise ValueError("sub_state needs a Mix.subset")
        self._rebuild(rows, mix)
        st = self._state
        if st is None:
            raise RuntimeError("RowStore.sub_state before the state was built")
        idx = np.asarray(classes, dtype=np.intp)

        at = rows if cols is None else cols

        def pick(a: np.ndarray, which: np.ndarray) -> np.ndarray:  # whole rows first, then columns: no 2-D fancy index
            return a[which][:, cols] if cols is not None else np.take(a[which], rows, axis=1)

        frag = pick(st.frag, idx)
        return MixState(pick(st.n_ok, idx), pick(st.strand, idx), frag, st.total[at], sub.weight @ frag,
                        pick(st.n_base, sub.parent_bases), pick(st.s_base, sub.parent_bases), st.row_type[at],
                        st.mixed[at])

    def class_rows(self, rows: np.ndarray, mix: Mix, classes: list[int],
                   cols: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of the rows' state under ``mix``: ``frag`` of ``classes`` only, ``row_type`` and ``mixed`` (what a class's
        growth at one device needs besides the per-base figures). ``cols``: ``rows``, or as a slice where they are
        ``0..n-1`` in order."""
        self._rebuild(rows, mix)
        st = self._state
        if st is None:
            raise RuntimeError("RowStore.class_rows before the state was built")
        frag = st.frag[np.asarray(classes, dtype=np.intp)]
        frag = frag[:, cols] if isinstance(cols, slice) else np.take(frag, cols, axis=1)
        return frag, st.row_type[cols], st.mixed[cols]

    def _rebuild(self, rows: np.ndarray, mix: Mix) -> None:
        cap = len(self.stamp)
        if self._state is None or self._state.n_ok.shape != (len(mix), cap):
            classes, bases = len(mix), int(mix.base_spec.cores.shape[0])
            self._state = MixState(np.zeros((classes, cap)), np.zeros((classes, cap)), np.zeros((classes, cap)),
                                   np.zeros(cap), np.zeros(cap), np.zeros((bases, cap)), np.zeros((bases, cap)),
                                   np.full(cap, -1, dtype=np.intp), np.zeros(cap, dtype=bool))
            self._state_stamp = np.full(cap, -1, dtype=np.int64)
        stale = rows[self._state_stamp[rows] != self.stamp[rows]]
        if len(stale):
            if len(stale) >= _DEDUP_ROWS and self.device_id[stale].min() >= 0:
                # a new mix rebuilds every row, and most rows share their devices' state with others: the device
                # figures once per state (the same arithmetic on the same inputs), the host part row by row
                _, first, spread = np.unique(self.device_id[stale], return_index=True, return_inverse=True)
                fresh = MixState.of(self.view(stale[first]), mix, spread.ravel(), self.host[stale])
            else:
                fresh = MixState.of(self.view(stale), mix)
            for f in MixState.__slots__:
                target = getattr(self._state, f)
                if target.ndim == 2:
                    target[:, stale] = getattr(fresh, f)
                else:
                    target[stale] = getattr(fresh, f)
            self._state_stamp[stale] = self.stamp[stale]

    def _take(self, rows: np.ndarray) -> MixState:
        """The state's columns for ``rows``, gathered into buffers this store reuses.

        Fresh ``(classes, rows)`` arrays of a few hundred KB each cost more in page faults (the allocator
        hands such sizes back to the system when freed) than the gather itself. The result is valid until
        the next call.
        """
        state = self._state
        if state is None:
            raise RuntimeError("RowStore._take before the state was built")
        out = []
        for f in MixState.__slots__:
            src = getattr(state, f)
            size = (src.shape[0] if src.ndim == 2 else 1) * len(rows)
            buf = self._buffers.get(f)
            if buf is None or buf.size < size or buf.dtype != src.dtype:
                buf = self._buffers[f] = np.empty(max(size, src.size), dtype=src.dtype)
            dst = buf[:size].reshape((*src.shape[:-1], len(rows)))
            np.take(src, rows, axis=src.ndim - 1, out=dst, mode="clip")  # rows are valid: "clip" avoids a copy
            out.append(dst)
        return MixState(*out)

    # ------------------------------------------------------------------------------------ sizing
    def _ensure(self, size: int) -> None:
        old = len(self.stamp)
        if size <= old:
            return
        new = max(size, 2 * old, 64)
        grow = new - old
        self.stamp = np.concatenate([self.stamp, np.full(grow, -1, dtype=np.int64)])
        self.arr = np.concatenate([self.arr, np.zeros((_FIELDS, grow, self.width))], axis=1)
        self.type_idx = np.concatenate([self.type_idx, np.full((grow, self.width), -1, dtype=np.intp)])
        self.order = np.concatenate([self.order, np.zeros((grow, self.width))])
        self.host = np.concatenate([self.host, np.zeros((grow, 2))])
        self.free = np.concatenate([self.free, np.zeros(grow)])
        self.device_id = np.concatenate([self.device_id, np.full(grow, -1, dtype=np.int64)])
        self._state_stamp = np.concatenate([self._state_stamp, np.full(grow, -1, dtype=np.int64)])
        self._state = None  # resized on next use

    def _widen(self, width: int) -> None:
        extra = width - self.width
        rows = len(self.stamp)
        self.arr = np.concatenate([self.arr, np.zeros((_FIELDS, rows, extra))], axis=2)
        self.type_idx = np.concatenate([self.type_idx, np.full((rows, extra), -1, dtype=np.intp)], axis=1)
        self.width = width
        self.order = np.zeros((rows, width))
        self.stamp[:] = -1  # positions in ``order`` depend on the width: rebuild every row on next use
        self._state = None
        self._device_ids.clear()  # the devices' bytes of one width: a new numbering
        self.epoch += 1
