"""What one ``pending`` attempt of the simulator's defragmenter (:mod:`hami_core.sim.defrag`) knows of the cluster.

Taken afresh at each attempt, on the replay's state: each card's free share and type, which placed pods have room
elsewhere as things are (a *mover*: a node with their CPU and memory and enough cards of their models with their
share free), which one-card pods would have room two hops away (a *hop*: a card that moving movers off opens
enough), and per card the share those pods hold there (the most a card can be emptied by). Every test is an array
operation over the nodes x cards matrix, cached per pod shape: thousands of placed pods are surveyed per attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hami_core.sim.fragmentation import FULL
from hami_core.sim.workload import SimPod

#: a pod's shape as the survey caches it: (class, CPU milli, memory MiB)
Shape = tuple[Any, int, int]


class Survey:
    """See the module docstring. ``devices[i]``: node ``i``'s device usage objects; ``live``: placed GPU pods (key ->
    (task, ...)); ``cards_of(key)``: the card ids a placed pod holds, ``None`` for one that may not move."""

    def __init__(self, devices: Sequence[Sequence[Any]], live: Mapping[str, tuple[SimPod, Any, Any, Any]],
                 cards_of: Callable[[str], list[str] | None], cpu_free: np.ndarray, mem_free: np.ndarray,
                 share: Callable[[Any], float]) -> None:
        self.devices, self.cpu_free, self.mem_free = devices, cpu_free, mem_free
        width = max((len(devs) for devs in devices), default=0)
        #: each card's free share (0 without a free slot or health; -1: no card there) and upper-cased type
        self.free = np.full((len(devices), width), -1.0)
        self.types = np.full((len(devices), width), "", dtype=object)
        for i, devs in enumerate(devices):
            for j, d in enumerate(devs):
                self.free[i, j] = FULL - share(d) if d.health and d.used < d.count else 0.0
                self.types[i, j] = d.type.upper()
        self.card_at = {d.id: (i, j) for i, devs in enumerate(devices) for j, d in enumerate(devs)}
        self._type_ok: dict[tuple[str, ...], np.ndarray] = {}
        self._room: dict[Shape, bool] = {}
        self._hop_room: dict[Shape, bool] = {}
        #: movers and hops (pod keys); per card the share both hold there, and the movers with their share
        self.movers: set[str] = set()
        self.hops: set[str] = set()
        self.movable_share: dict[str, float] = {}
        self.movers_on: dict[str, list[tuple[str, float]]] = {}
        self.live = live
        cards: dict[str, list[str]] = {}
        for key, (task, *_rest) in live.items():
            held = cards_of(key)
            if held is None:
                continue
            cards[key] = held
            if self.has_room(task):
                self.movers.add(key)
                for uuid in held:
                    self.movable_share[uuid] = self.movable_share.get(uuid, 0.0) + float(task.per_gpu)
                    self.movers_on.setdefault(uuid, []).append((key, float(task.per_gpu)))
        #: each card's free share once its movers moved
        self.opened = self.free.copy()
        for uuid, value in self.movable_share.items():
            i, j = self.card_at[uuid]
            self.opened[i, j] += value
        for key, held in cards.items():
            task = live[key][0]
            if key in self.movers or task.num_gpu != 1 or not self._hop_fits(task):
                continue
            self.hops.add(key)
            for uuid in held:
                self.movable_share[uuid] = self.movable_share.get(uuid, 0.0) + float(task.per_gpu)

    def cards_for(self, task: SimPod) -> np.ndarray:
        """The cards (nodes x cards) of a type the pod accepts (the engine's use-gputype rule: the card type
        contains an entry)."""
        models = tuple(m.upper() for m in task.models)
        if not models:
            return np.ones(self.free.shape, dtype=bool)
        if models not in self._type_ok:
            kinds = {t: any(m in t for m in models) for t in set(self.types.ravel().tolist())}
            self._type_ok[models] = np.vectorize(kinds.__getitem__, otypes=[bool])(self.types)
        return self._type_ok[models]

    def _host(self, task: SimPod) -> np.ndarray:
        return (self.cpu_free >= task.cpu_milli) & (self.mem_free >= task.memory_mib)

    def has_room(self, task: SimPod) -> bool:
        """Is there, as things are, a node with room for the pod's CPU and memory and enough cards of its models
        with room for its share? A pod with nowhere to go is no victim (a model-constrained pod on a full model,
        most often)."""
        shape = (task.klass, task.cpu_milli, task.memory_mib)
        if shape not in self._room:
            cards = (self.free + 1e-9 >= task.per_gpu) & self.cards_for(task)
            self._room[shape] = bool((self._host(task) & (cards.sum(axis=1) >= max(task.num_gpu, 1))).any())
        return self._room[shape]

    def _hop_fits(self, task: SimPod) -> bool:
        """Could the one-card pod go to some card once its movers moved, on a node with room for its CPU and
        memory?"""
        shape = (task.klass, task.cpu_milli, task.memory_mib)
        if shape not in self._hop_room:
            cards = (self.opened + 1e-9 >= task.per_gpu) & self.cards_for(task)
            self._hop_room[shape] = bool((cards.any(axis=1) & self._host(task)).any())
        return self._hop_room[shape]

    def make_way(self, victim: str, avoid: set[str], taken: set[str],
                 spent: dict[str, float]) -> tuple[str, list[str]] | None:
        """For a hop: the fewest movers on one card (not in ``avoid``, on a node with room for the victim's CPU and
        memory) whose moving leaves the card room for it; ``taken``: pods already moved, ``spent``: share already
        promised per card to earlier victims. (The card, those movers), or ``None``."""
        task = self.live[victim][0]
        need = float(task.per_gpu)
        ok = (self.opened + 1e-9 >= need) & self.cards_for(task) & self._host(task)[:, None]
        best: tuple[int, float, str, list[str]] | None = None
        for i, j in zip(*np.nonzero(ok), strict=True):
            d = self.devices[int(i)][int(j)]
            if d.id in avoid:
                continue
            room = self.free[i, j] - spent.get(d.id, 0.0)
            pods = sorted(((k, sh) for k, sh in self.movers_on.get(d.id, ()) if k not in taken),
                          key=lambda e: (-e[1], e[0]))
            picked: list[str] = []
            for k, sh in pods:
                if room + 1e-9 >= need:
                    break
                picked.append(k)
                room += sh
            if room + 1e-9 >= need and (best is None or (len(picked), -room) < (best[0], -best[1])):
                best = (len(picked), room, d.id, picked)
                if not picked:
                    break
        if best is None:
            return None
        return best[2], best[3]


__all__ = ["Survey"]
