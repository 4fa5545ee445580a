"""Why a pod fits where it fits, and nowhere else: per node, per request, per device and per check.

An explanation is computed on demand (``hami explain``, ``hami simulate --explain``), never by a filter, and it is
the engine's own verdict, not a second implementation that could drift from it:

* each node's verdict and reason come from fitting the pod on that node alone through the same
  :class:`~hami_core.engine.cycle.Cycle` steps a filter runs (the pod's own reservation left out, earlier containers'
  devices booked, the quota view of each container, ``hami_filter_nodes`` of the backend's plugins);
* each device's verdict comes from the same ``hami_filter_nodes`` call asked to place one device of the request on
  that device alone. A fit records the *first* check a device fails (HAMi's order: health, cordon, type, NUMA,
  UUID, split count, mutex, quota, memory, cores, exclusive, compute, the vendor's rule), so the reason the one-device
  fit gives names the failing check; checks before it passed, checks after it were not reached;
* the real filter's decision (:meth:`Engine.schedule <hami_core.engine.facade.Engine.schedule>` over every candidate)
  supplies the scores and the chosen node, and its verdict per node is kept beside the explanation's
  (``NodeExplanation.filter_reason``), so a disagreement would show.

Node-level rules that no single device decides (how many devices are needed, NUMA grouping, topology, MIG layouts)
show in the node's reason (``AllocatedCardsInsufficientRequest``, ``NumaNotFit``...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hami_core.engine.cycle import DEVICE_TYPE_NOT_FOUND, Cycle
from hami_core.engine.inventory import NodeState
from hami_core.engine.pods import annotations as pod_annotations
from hami_core.plugins.errors import HamiError
from hami_core.plugins.fit import memory_to_book
from hami_core.plugins.objects import containers as pod_containers
from hami_core.plugins.types import ContainerDevice, DeviceRequest, DeviceUsage, FitCandidate, FitResult
from hami_core.wire.reasons import NODE_UNREGISTERED, Reason, parse_reasons

__all__ = ["CHECKS", "CheckResult", "DeviceExplanation", "NodeExplanation", "NothingToExplain", "PodExplanation",
           "RequestExplanation", "check_of", "explain"]

#: The per-device checks in HAMi's order, each with the reason words that mean it failed. A reason word no check
#: names (a vendor's own) is the last check's, ``vendor``.
CHECKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("health", (Reason.CardNotHealth, Reason.CardUnhealthy)),
    ("cordon", (Reason.CardCordoned,)),
    ("type", (Reason.CardTypeMismatch, Reason.ModeNotFit, Reason.CardQosPolicyMismatch,
              Reason.CardAppClassMismatch)),
    ("numa", (Reason.NumaNotFit,)),
    ("uuid", (Reason.CardUuidMismatch,)),
    ("split", (Reason.CardTimeSlicingExhausted,)),
    ("exclusive", (Reason.ExclusiveDeviceAllocateConflict,)),
    ("quota", (Reason.ResourceQuotaNotFit,)),
    ("memory", (Reason.CardInsufficientMemory,)),
    ("cores", (Reason.CardInsufficientCore, Reason.CardComputeUnitsExhausted)),
    ("vendor", (Reason.CardNotFoundCustomFilterRule, Reason.CardMigTopologyInfeasible)),
)
_CHECK_OF = {word: name for name, words in CHECKS for word in words}
PASS, FAIL, NOT_REACHED = "pass", "fail", "not reached"


class NothingToExplain(HamiError):
    """The pod requests no device of the loaded plugins: the extender lets any node take it."""


def check_of(reason: str) -> str:
    """The check a one-device fit's reason names (``"1/1 CardInsufficientMemory"`` → ``memory``); ``vendor`` for a
    reason no standard check names."""
    words = parse_reasons(reason)
    for word in words:
        if word in _CHECK_OF:
            return _CHECK_OF[word]
    return "vendor"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check of one device: ``status`` is ``pass``, ``fail`` or ``not reached``; ``detail`` the facts."""

    name: str
    status: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DeviceExplanation:
    """One device against one request: ``reason`` is the one-device fit's (``""`` when the device can take it)."""

    id: str
    index: int
    type: str
    fits: bool
    reason: str
    failed_check: str | None
    checks: tuple[CheckResult, ...]
    chosen: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "index": self.index, "type": self.type, "fits": self.fits, "reason": self.reason,
                "failed_check": self.failed_check, "chosen": self.chosen,
                "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in self.checks]}


@dataclass(frozen=True, slots=True)
class RequestExplanation:
    """One container's request of one backend on one node."""

    container: str
    position: int
    init: bool
    backend: str
    request: DeviceRequest
    fits: bool
    reason: str
    devices: tuple[DeviceExplanation, ...]

    def to_json(self) -> dict[str, Any]:
        r = self.request
        return {"container": self.container, "position": self.position, "init": self.init, "backend": self.backend,
                "request": {"nums": r.nums, "memreq": r.memreq,
                            "mem_percentage": r.mem_percentage if r.mem_percentage <= 100 else None,
                            "coresreq": r.coresreq},
                "fits": self.fits, "reason": self.reason, "devices": [d.to_json() for d in self.devices]}


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    """One candidate node: the explanation's verdict (``fits``, ``reason``), the real filter's (``filter_fits``,
    ``filter_reason``), the policy score of a feasible node and whether the filter chose it."""

    name: str
    fits: bool
    reason: str
    requests: tuple[RequestExplanation, ...] = ()
    filter_fits: bool = False
    filter_reason: str = ""
    score: float | None = None
    chosen: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "fits": self.fits, "reason": self.reason, "score": self.score,
                "chosen": self.chosen, "filter": {"fits": self.filter_fits, "reason": self.filter_reason},
                "requests": [r.to_json() for r in self.requests]}


@dataclass(frozen=True, slots=True)
class PodExplanation:
    """A pod's explanation: its node and GPU policy, the node the filter would choose (``None``: none fits), why it
    cannot be scheduled at all (``error``), every candidate node, and what the scheduler persisted on the pod from
    its last failed filter (``persisted``, :mod:`hami_core.scheduler.reasons`)."""

    pod: str
    node: str | None
    nodes: tuple[NodeExplanation, ...]
    policy: Mapping[str, Any] | None = None
    error: str | None = None
    persisted: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "error": self.error, "policy": self.policy,
                "fitting_nodes": sum(1 for n in self.nodes if n.fits), "candidate_nodes": len(self.nodes),
                "nodes": [n.to_json() for n in self.nodes], "persisted": self.persisted, "notes": list(self.notes)}


def explain(engine: Any, pod: Mapping[str, Any], node_names: Iterable[str] | None = None, *,
            persisted: Mapping[str, Any] | None = None, notes: Sequence[str] = ()) -> PodExplanation:
    """Explain ``pod`` against ``node_names`` (default: every node ``engine`` knows). Changes no engine state.

    Raises :class:`NothingToExplain` when the pod requests no managed device.
    """
    plan = engine.plan(pod)
    if plan.empty:
        raise NothingToExplain(f"pod {plan.ref} requests no device of the loaded plugins "
                               f"({', '.join(sorted(engine.backends)) or 'none loaded'}): any node may take it")
    names = sorted(set(engine.nodes) if node_names is None else set(node_names))
    decision = engine.schedule(pod, names, plan=plan)  # limit None: every candidate is fitted and scored
    if plan.error is not None or plan.policy is None:
        return PodExplanation(plan.ref, None, (), error=decision.error or plan.error, persisted=persisted,
                              notes=tuple(notes))
    policy = plan.policy
    state = engine.state
    cycle = Cycle(hook=state.hook, backends=state.backends, pod=pod, key=plan.key, requests=plan.requests,
                  policy=policy, own=state.ledger.get(plan.key), shapes=plan.shapes,
                  workload=engine.workload.snapshot(), host_need=plan.host_need, quota=plan.quota)
    state.table.refresh()
    labels = _container_names(pod, len(plan.requests.containers), plan.requests.init_count)
    feasible = set(decision.nodes) if decision.ok else set()
    out = []
    for name in names:
        node = state.nodes.get(name)
        filter_fits = name in feasible
        filter_reason = "" if filter_fits else decision.failed.get(name, "")
        common = {"filter_fits": filter_fits, "filter_reason": filter_reason,
                  "score": decision.scores.get(name), "chosen": name == decision.node}
        if node is None or not node.by_uuid or node.quarantine:
            out.append(NodeExplanation(name, False, filter_reason or NODE_UNREGISTERED, **common))
            continue
        fits, reason, requests = _explain_node(cycle, node, labels)
        out.append(NodeExplanation(name, fits, reason, requests, **common))
    return PodExplanation(plan.ref, decision.node, tuple(out),
                          policy={"node": policy.node, "gpu": policy.gpu, "numa_bind": policy.numa_bind},
                          persisted=persisted, notes=tuple(notes))


def _explain_node(cycle: Cycle, node: NodeState, labels: Sequence[str]) -> tuple[bool, str,
                                                                               tuple[RequestExplanation, ...]]:
    """Fit the pod on ``node`` alone, container by container and backend by backend, as the filter does; stop at the
    first request that does not fit (the filter drops the node there)."""
    requests = cycle.requests
    cycle.exclude_own(node)
    out: list[RequestExplanation] = []
    for pos, container in enumerate(requests.containers):
        if not container:
            continue
        init = requests.is_init(pos)
        container_reqs = list(container.values())
        for name in sorted(container):
            backend = cycle.backends[name]
            request = container[name]
            devs = cycle._devices(node, name, init=init)
            devices = _explain_devices(cycle, node, pos, backend, request, devs, container_reqs)
            kept = cycle._fit_backend([node], pos, init, backend, container_reqs)
            if kept:
                chosen = {d.uuid for d in _chosen(cycle, node.name, name, pos)}
                devices = tuple(replace(d, chosen=True) if d.id in chosen else d for d in devices)
                out.append(RequestExplanation(labels[pos], pos, init, name, request, True, "", devices))
                continue
            reason = cycle.failed.get(node.name, "")
            out.append(RequestExplanation(labels[pos], pos, init, name, request, False, reason, devices))
            return False, reason, tuple(out)
    return True, "", tuple(out)


def _chosen(cycle: Cycle, node: str, backend: str, pos: int) -> tuple[ContainerDevice, ...]:
    slots = (cycle.alloc.get(node) or {}).get(backend) or ()
    return tuple(slots[pos]) if pos < len(slots) else ()


def _explain_devices(cycle: Cycle, node: NodeState, pos: int, backend: Any, request: DeviceRequest,
                     devs: list[DeviceUsage], container_reqs: list[Any]) -> tuple[DeviceExplanation, ...]:
    """Every device of ``backend`` on ``node`` against one device's worth of ``request``: one ``hami_filter_nodes``
    call with one candidate per device (each the node with that device alone), in the GPU policy's order."""
    if not devs:
        return ()
    candidate = cycle._candidate(node, pos, backend.name, devs, container_reqs)
    one = replace(request, nums=1)
    singles = [FitCandidate(candidate.node, [d], candidate.allocated) for d in candidate.devices]
    results = cycle._filter(backend, one, singles, cycle.quota_for(pos, backend))
    out = []
    # the policy order puts the preferred device last (HAMi walks from the end): list the preferred first
    for dev, result in zip(reversed(candidate.devices),
                           reversed(results) if results is not None else [None] * len(singles), strict=True):
        out.append(_device(dev, request, result, cycle.quota_for(pos, backend) is not None))
    return tuple(out)


def _device(dev: DeviceUsage, request: DeviceRequest, result: FitResult | None, quota: bool) -> DeviceExplanation:
    if result is None:
        reason, fits = DEVICE_TYPE_NOT_FOUND, False
    elif not isinstance(result, FitResult):
        reason, fits = f"plugin answered {result!r}", False
    else:
        fits, reason = result.ok, result.reason
    failed = None if fits else (check_of(reason) if result is not None else "type")
    facts = _facts(dev, request, quota)
    checks = []
    status = PASS
    for name, _words in CHECKS:
        if name == failed:
            checks.append(CheckResult(name, FAIL, facts.get(name, "") or reason))
            status = NOT_REACHED
            continue
        checks.append(CheckResult(name, status, facts.get(name, "")))
    return DeviceExplanation(dev.id, dev.index, dev.type, fits, "" if fits else reason, failed, tuple(checks))


def _facts(dev: DeviceUsage, request: DeviceRequest, quota: bool) -> dict[str, str]:
    """What each check looked at, for people (the verdicts are the fit's, never derived from these)."""
    mem = memory_to_book(dev, request)
    cores = min(request.coresreq, 100)
    return {
        "health": "healthy" if dev.health else "unhealthy",
        "type": f"{dev.type}" + (f" ({dev.mode})" if dev.mode else ""),
        "numa": f"numa {dev.numa}",
        "split": f"{dev.used}/{dev.count} shares used",
        "exclusive": f"{dev.used} pod(s) on it" if dev.used else "idle",
        "quota": "namespace quota applies" if quota else "no quota limits it",
        "memory": f"needs {mem} MiB, {dev.totalmem - dev.usedmem} of {dev.totalmem} MiB free",
        "cores": f"needs {cores}%, {dev.totalcore - dev.usedcores} of {dev.totalcore} free",
    }


def _container_names(pod: Mapping[str, Any], positions: int, init_count: int) -> list[str]:
    """Container names by request position (init containers first), ``#<pos>`` where the pod names none."""
    init, app = pod_containers(pod)
    names = [str(c.get("name") or "") for c in (*init, *app)]
    out = []
    for pos in range(positions):
        label = names[pos] if pos < len(names) and names[pos] else f"#{pos}"
        out.append(f"{label} (init)" if pos < init_count else label)
    return out


def pod_reasons(pod: Mapping[str, Any], key: str) -> Any:
    """The JSON the scheduler persisted under annotation ``key`` on ``pod``, or ``None``; a value that is not JSON
    is given back as text (a hand-edited annotation must not stop an explanation)."""
    import json

    raw = pod_annotations(pod).get(key)
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"unreadable": raw}
