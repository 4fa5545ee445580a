"""Device-aware preemption: which pods on a node must go so that a higher-priority pod fits its devices there.

kube-scheduler's DefaultPreemption reasons about what it sees (CPU, memory, the resources hami does not manage).
This module answers the device half with the engine's own fit, so a victim set is judged by exactly the checks
that refused the pod (several cards, memory and cores per card, type/UUID selection, NUMA, mutex, quota):

* :func:`choose_victims`: the fewest, lowest-priority pods of ``candidates`` on one node whose removal lets the pod
  fit its devices there, or ``None`` when removing every candidate does not help (a type mismatch, an unhealthy
  card: no preemption fixes it);
* :func:`preemption_can_help`: that last question alone, for the filter's *unresolvable* nodes.

A trial removes the candidates' bookings from the ledger, fits the pod on that one node and books them back, so the
engine's state is the same after every call (bookings are restored in a ``finally``). Only pods of strictly lower
priority are ever victims (kube-scheduler's rule), and a pod whose removal frees nothing the pod asks for (no booking
of a backend it requests on that node) is never one.

Exact search up to :data:`EXACT_LIMIT` useful candidates (subsets by size, then by PDB violations, highest and summed
priority: the first that fits is minimal in that order); beyond it, kube-scheduler's reprieve (remove all, give back
from the highest priority down whatever still lets the pod fit), whose every victim is necessary.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hami_core.engine.ledger import Booking
from hami_core.engine.pods import pod_priority
from hami_core.plugins.objects import pod_key, pod_ref

if TYPE_CHECKING:
    from hami_core.engine.facade import Engine

__all__ = ["EXACT_LIMIT", "Candidate", "VictimChoice", "candidates_on", "choose_victims", "helpful_nodes",
           "placed_candidates", "pod_priority", "preemption_can_help", "rank_choice", "without"]

#: Subsets of up to this many useful candidates are searched exhaustively (2**12 fits at worst, about a second).
EXACT_LIMIT = 12


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pod that may be evicted: its ledger key, ``namespace/name``, UID, priority, and whether evicting it breaks
    a PodDisruptionBudget (kube-scheduler's per-pod answer; such pods are evicted last)."""

    key: str
    ref: str
    uid: str
    priority: int
    violates_pdb: bool = False

    @classmethod
    def of(cls, pod: Mapping[str, Any], *, violates_pdb: bool = False) -> Candidate:
        meta = pod.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        return cls(pod_key(pod), pod_ref(pod), str(uid or ""), pod_priority(pod), violates_pdb)


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """One node's answer: ``victims`` (lowest priority first) when ``fits``; else why not (``reason``)."""

    node: str
    fits: bool
    victims: tuple[Candidate, ...] = ()
    reason: str = ""


def candidates_on(engine: Engine, node: str, pods: Iterable[Mapping[str, Any]],
                  priority: int) -> list[Candidate]:
    """The pods of ``pods`` that hold a booking on ``node`` and have a priority below ``priority``."""
    booked = {b.key for b in engine.ledger.on_node(node)}
    return [c for c in (Candidate.of(p) for p in pods) if c.key in booked and c.priority < priority]


def placed_candidates(engine: Engine, node: str, priority: int) -> list[Candidate]:
    """The placed pods on ``node`` (allocation written, as the engine last saw them) of priority below ``priority``,
    from the engine alone: no pod object needed (reservations of pods still being filtered are not candidates)."""
    priorities = engine.state.priorities
    out = []
    for booking in engine.ledger.on_node(node):
        prio = priorities.get(booking.key)
        if prio is not None and prio < priority:
            out.append(Candidate(booking.key, booking.pod, booking.key, prio))
    return out


def helpful_nodes(engine: Engine, pod: Mapping[str, Any], nodes: Iterable[str]) -> dict[str, list[Candidate]]:
    """The nodes of ``nodes`` where some preemption can make ``pod`` fit, with their candidates (the placed pods of
    lower priority that hold a device the pod asks for), in ``nodes``' order.

    One batched fit instead of one per node: every such candidate of every node leaves the ledger together and the
    pod is fitted on all the nodes that had one at once. The answer is the same as :func:`preemption_can_help` node
    by node, since a node's fit depends on that node's bookings alone (a namespace quota aside, which the batched
    view makes more lenient: the candidates are fitted again one node at a time by :func:`choose_victims`)."""
    priority = pod_priority(pod)
    wanted = _backends_requested(engine, pod)
    by_node: dict[str, list[Candidate]] = {}
    for node in nodes:
        useful = _useful(engine, pod, node, placed_candidates(engine, node, priority), priority, wanted)
        if useful:
            by_node[node] = useful
    if not by_node:
        return {}
    with without(engine, [c.key for useful in by_node.values() for c in useful]):
        fitting = set(engine.schedule(pod, list(by_node)).nodes)
    return {node: useful for node, useful in by_node.items() if node in fitting}


def preemption_can_help(engine: Engine, pod: Mapping[str, Any], node: str, candidates: Sequence[Candidate]) -> bool:
    """Would the pod fit its devices on ``node`` with every one of ``candidates`` gone?"""
    useful = _useful(engine, pod, node, candidates, pod_priority(pod))
    return bool(useful) and _fits(engine, pod, node, [c.key for c in useful])


def choose_victims(engine: Engine, pod: Mapping[str, Any], node: str, candidates: Sequence[Candidate], *,
                   exact_limit: int = EXACT_LIMIT, helpful: bool = False) -> VictimChoice:
    """The fewest, lowest-priority ``candidates`` on ``node`` whose removal lets ``pod`` fit its devices there.

    ``fits`` with no victims when the pod fits already. Candidates of equal or higher priority, and candidates that
    hold nothing the pod asks for on that node, are never chosen. ``helpful``: the caller knows (from
    :func:`helpful_nodes`) that the pod does not fit as things are and does with every candidate gone, which saves
    the two fits that establish it.
    """
    if not helpful and _fits(engine, pod, node, ()):
        return VictimChoice(node, True)
    useful = _useful(engine, pod, node, candidates, pod_priority(pod))
    if not useful:
        return VictimChoice(node, False, reason="no lower-priority pod holds a device the pod asks for")
    if not helpful and not _fits(engine, pod, node, [c.key for c in useful]):
        return VictimChoice(node, False, reason="the pod does not fit even with every lower-priority pod gone")
    victims = _exact(engine, pod, node, useful) if len(useful) <= exact_limit else _reprieve(engine, pod, node, useful)
    return VictimChoice(node, True, tuple(sorted(victims, key=lambda c: (c.priority, c.ref))))


def rank_choice(choice: VictimChoice, pdb: int = 0) -> tuple[int, int, int, int, str]:
    """How good a node's victims are, lowest first, in kube-scheduler's order (pickOneNodeForPreemption): fewest
    PDB violations (``pdb``), lowest highest-priority victim, lowest sum of priorities, fewest victims; then the
    node name, for a deterministic choice."""
    prios = [v.priority for v in choice.victims]
    return (pdb, max(prios), sum(prios), len(prios), choice.node)


def _useful(engine: Engine, pod: Mapping[str, Any], node: str, candidates: Sequence[Candidate],
            priority: int, wanted: frozenset[str] | None = None) -> list[Candidate]:
    if wanted is None:
        wanted = _backends_requested(engine, pod)
    bookings = {b.key: b for b in engine.ledger.on_node(node)}
    out: list[Candidate] = []
    seen: set[str] = set()
    for c in candidates:
        booking = bookings.get(c.key)
        if c.priority >= priority or booking is None or c.key in seen or not _holds_any(booking, wanted):
            continue
        seen.add(c.key)
        out.append(c)
    return out


def _backends_requested(engine: Engine, pod: Mapping[str, Any]) -> frozenset[str]:
    requests = engine.requests(pod)
    return frozenset(name for container in requests.containers for name in container)


def _holds_any(booking: Booking, backends: frozenset[str]) -> bool:
    return any(backend in backends and devices for backend, devices in booking.devices.items())


def _exact(engine: Engine, pod: Mapping[str, Any], node: str, useful: list[Candidate]) -> list[Candidate]:
    for size in range(1, len(useful) + 1):
        subsets = sorted(itertools.combinations(useful, size), key=_cost)
        for subset in subsets:
            if _fits(engine, pod, node, [c.key for c in subset]):
                return list(subset)
    return list(useful)  # unreachable: the caller checked that all of them fit


def _cost(subset: tuple[Candidate, ...]) -> tuple[int, int, int, tuple[str, ...]]:
    # kube-scheduler's order of preference between victim sets (after their size): fewest PDB violations, lowest
    # highest priority, lowest summed priority; names last so that the choice is deterministic.
    return (sum(c.violates_pdb for c in subset), max(c.priority for c in subset), sum(c.priority for c in subset),
            tuple(sorted(c.ref for c in subset)))


def _reprieve(engine: Engine, pod: Mapping[str, Any], node: str, useful: list[Candidate]) -> list[Candidate]:
    # kube-scheduler's SelectVictimsOnNode: with all of them gone the pod fits; give back first the pods that would
    # break a PDB, then the others, highest priority first, each one that the pod can spare.
    order = sorted(useful, key=lambda c: (not c.violates_pdb, -c.priority, c.ref))
    victims = {c.key: c for c in useful}
    for c in order:
        del victims[c.key]
        if not _fits(engine, pod, node, list(victims)):
            victims[c.key] = c
    return list(victims.values())


def _fits(engine: Engine, pod: Mapping[str, Any], node: str, removed: Sequence[str]) -> bool:
    with without(engine, removed):
        return engine.schedule(pod, [node]).ok  # planned inside: the quota view then leaves the victims out


@contextmanager
def without(engine: Engine, keys: Sequence[str]) -> Iterator[None]:
    """The ledger with ``keys``' bookings taken out for the block, then put back exactly."""
    ledger, nodes = engine.ledger, engine.nodes
    saved: list[Booking] = []
    try:
        for key in keys:
            booking = ledger.unbook(key, nodes)
            if booking is not None:
                saved.append(booking)
        yield
    finally:
        for booking in saved:
            ledger.book(booking, nodes)
