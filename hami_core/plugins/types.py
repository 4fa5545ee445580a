"""Objects exchanged between hami-core and its plugins.

Results that plugins return are frozen, slotted dataclasses validated in ``__post_init__`` (a bad value
raises :class:`PluginError` naming the field). Inputs that the engine hands to plugins on the hot path
(:class:`DeviceUsage`, :class:`FitCandidate`, :class:`ScoreCandidate`) are slotted but mutable for speed;
plugins must treat them as read-only.

Units follow HAMi: memory in MiB, cores in percent of one card (100 = whole card), ``count`` is the split
count (how many tasks may share a device).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hami_core.plugins.errors import PluginError

#: ``DeviceRequest.mem_percentage`` value meaning "not set" (HAMi's sentinel).
MEM_PERCENTAGE_UNSET = 101


class FilterCode(enum.Enum):
    """Outcome of fitting a request onto one node, as in the kube-scheduler framework."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"
    SKIP = "Skip"


def _require(cond: bool, owner: str, message: str) -> None:
    if not cond:
        raise PluginError(f"{owner}: {message}")


# --------------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Extended-resource names a backend reads from containers (HAMi ``GetResourceNames``).

    ``memory_factor`` scales the memory quantity into MiB (Cambricon 256, Mthreads 512, ...).
    Empty names mean "this backend has no such resource".
    """

    count: str
    memory: str = ""
    memory_percentage: str = ""
    cores: str = ""
    priority: str = ""
    memory_factor: int = 1

    def __post_init__(self) -> None:
        _require(bool(self.count), "ResourceNames", "count resource name must not be empty")
        _require(self.memory_factor >= 1, "ResourceNames", f"memory_factor must be >= 1, got {self.memory_factor}")

    def all(self) -> tuple[str, ...]:
        """Every non-empty resource name, count first."""
        names = (self.count, self.memory, self.memory_percentage, self.cores, self.priority)
        return tuple(n for n in names if n)


@dataclass(frozen=True, slots=True)
class DeviceBackend:
    """One vendor backend: the static facts of HAMi's ``Devices`` implementation.

    ``name`` is HAMi's common word (``NVIDIA``, ``MLU``, ``Ascend910B3``): the request ``Type``, the key
    of pod allocations and the word every registered device ``type`` contains. ``vendor`` is the short
    plugin name (``nvidia``). Annotation keys that a backend does not use stay ``None``.
    """

    name: str
    vendor: str
    resource_names: ResourceNames
    register_annotation: str | None = None
    handshake_annotation: str | None = None
    to_allocate_annotation: str | None = None
    allocated_annotation: str | None = None
    use_type_annotation: str | None = None
    nouse_type_annotation: str | None = None
    use_uuid_annotation: str | None = None
    nouse_uuid_annotation: str | None = None
    lock_annotation: str | None = None
    #: The backend's fit never places a request on a device without a free slot, with fewer free cores
    #: than ``min(coresreq, 100)`` or less free memory than ``memreq``, nor a 100-core request on a busy
    #: 100-core device (true of :func:`~hami_core.plugins.fit.standard_fit`). The engine may then skip,
    #: from numeric summaries, nodes that cannot meet these before calling the filter hook.
    standard_capacity: bool = False
    #: HAMi's ``NodeCleanUp`` deletes the handshake annotation of a node that went stale (NVIDIA, Hygon...);
    #: backends whose cleanup keeps it (Iluvatar) set False.
    cleanup_handshake: bool = True
    config: Any = field(default=None, compare=False, repr=False)
    #: Filled in by the plugin manager: the name of the plugin that registered this backend.
    plugin: str = ""

    def __post_init__(self) -> None:
        _require(bool(self.name) and "," not in self.name and ":" not in self.name and ";" not in self.name,
                 "DeviceBackend", f"name {self.name!r} must be non-empty and free of ',', ':' and ';'")
        _require(bool(self.vendor), f"DeviceBackend {self.name!r}", "vendor must not be empty")
        _require(isinstance(self.resource_names, ResourceNames), f"DeviceBackend {self.name!r}",
                 "resource_names must be a ResourceNames")


# --------------------------------------------------------------------------------------------------
# Inventory
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """A MIG placement: GPU slices ``[start, start + size)``."""

    start: int
    size: int

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile a device may host (``migProfiles`` in the NVIDIA registration)."""

    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[Placement, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One device as registered by a node (HAMi ``DeviceInfo``)."""

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    health: bool = False
    mig_profiles: tuple[MigProfile, ...] = ()
    custom_info: Mapping[str, Any] | None = None
    #: Backend name (common word) that owns the device; set by the engine.
    vendor: str = ""
    #: Topology pair scores to other devices on the node (``hami.io/node-nvidia-score``).
    pair_scores: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        owner = f"DeviceInfo {self.id!r}"
        _require(bool(self.id), "DeviceInfo", "id must not be empty")
        _require(self.index >= 0, owner, f"index must be >= 0, got {self.index}")
        for name in ("count", "devmem", "devcore"):
            _require(getattr(self, name) >= 0, owner, f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG instance booked on a GPU (HAMi ``MigAllocationsInUse`` entry): its profile and placement, and the
    runtime identity once the device plugin has realized it (``hami.io/vgpu-mig-allocations``)."""

    profile: str
    placement: Placement
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


class DeviceUsage:
    """A device plus what is booked on it. Built and updated by the engine; read-only for plugins.

    ``mig_in_use``: the MIG instances booked on a MIG-mode GPU (pods' ``hami.io/vgpu-mig-allocations``), whose
    placements a new instance must not overlap. ``mig_conflicts``: bookings that contradict the device's mode (a MIG
    allocation on a non-MIG GPU, or a MIG GPU used without one); while any exist the device is unhealthy
    (``health`` False), as HAMi marks it for its usage computation (spec §6.3 step 3).
    """

    __slots__ = ("count", "health", "id", "index", "info", "mig_conflicts", "mig_in_use", "mode", "numa",
                 "totalcore", "totalmem", "type", "used", "usedcores", "usedmem")

    def __init__(self, info: DeviceInfo, used: int = 0, usedmem: int = 0, usedcores: int = 0) -> None:
        self.info = info
        self.id = info.id
        self.index = info.index
        self.count = info.count
        self.totalmem = info.devmem
        self.totalcore = info.devcore
        self.type = info.type
        self.numa = info.numa
        self.mode = info.mode
        self.health = info.health
        self.used = used
        self.usedmem = usedmem
        self.usedcores = usedcores
        self.mig_in_use: tuple[MigInstance, ...] = ()
        self.mig_conflicts = 0

    def copy(self) -> DeviceUsage:
        dup = DeviceUsage.__new__(DeviceUsage)
        for name in DeviceUsage.__slots__:
            setattr(dup, name, getattr(self, name))
        return dup

    def __repr__(self) -> str:
        return (f"DeviceUsage({self.id!r}, used={self.used}/{self.count}, mem={self.usedmem}/{self.totalmem}, "
                f"cores={self.usedcores}/{self.totalcore})")


@dataclass(frozen=True, slots=True)
class HealthReport:
    """Result of ``hami_node_health``: HAMi's ``CheckHealth`` ``(healthy, needUpdate)`` plus side effects.

    ``annotations`` is a merge patch for the Node that the caller applies (value ``None`` deletes the
    key), for example the scheduler's ``Requesting_<time>`` handshake mark.
    """

    healthy: bool
    need_update: bool = True
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    reason: str = ""


class NodeView(Protocol):
    """What plugins may read about a node in the hot path (the engine's node state implements it)."""

    name: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    allocatable: Mapping[str, str]
    devices: Mapping[str, Sequence[DeviceUsage]]


# --------------------------------------------------------------------------------------------------
# Admission and requests
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mutation:
    """Result of ``hami_mutate_container``: whether the container requests this backend."""

    requested: bool


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """What one container asks of one backend (HAMi ``ContainerDeviceRequest``).

    ``mem_percentage`` is 0..100, or :data:`MEM_PERCENTAGE_UNSET` (101) when not given. ``coresreq`` is >= 0
    unless a backend keeps HAMi's negative cores (NVIDIA ``negativeCores: keep``).
    """

    backend: str
    nums: int
    memreq: int = 0
    mem_percentage: int = MEM_PERCENTAGE_UNSET
    coresreq: int = 0

    def __post_init__(self) -> None:
        owner = f"DeviceRequest({self.backend!r})"
        _require(self.nums > 0, owner, f"nums must be > 0, got {self.nums}")
        _require(self.memreq >= 0, owner, f"memreq must be >= 0, got {self.memreq}")
        # A negative coresreq is HAMi's own behaviour, kept only by a backend told to (NVIDIA negativeCores: keep):
        # it books as written, so the codec and the fits carry it; int32 is what the annotation holds.
        _require(self.coresreq >= -(2**31), owner, f"coresreq must be an int32, got {self.coresreq}")


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """Every container's requests for one pod: ``containers[i]`` maps backend name → request.

    Positions follow HAMi: init containers first (``init_count`` of them), then app containers.
    """

    containers: tuple[Mapping[str, DeviceRequest], ...]
    init_count: int = 0
    names: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not any(self.containers)

    def backends(self) -> tuple[str, ...]:
        return tuple(sorted({b for c in self.containers for b in c}))

    def is_init(self, position: int) -> bool:
        return position < self.init_count


# --------------------------------------------------------------------------------------------------
# Filter and score
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device assigned to one container (HAMi ``ContainerDevice``).

    ``type`` is the backend name as written on the wire. ``idx`` (device index) and ``custom_info`` are
    in-memory only; ``slots`` is set on collapsed usage (how many tasks the entry stands for).
    """

    uuid: str
    type: str
    usedmem: int
    usedcores: int
    idx: int = -1
    slots: int = 0
    custom_info: Mapping[str, Any] | None = field(default=None, compare=False)


#: One pod's devices for one backend: position = container (init first) → its devices.
PodSingleDevice = tuple[tuple[ContainerDevice, ...], ...]
#: Backend name → :data:`PodSingleDevice`.
PodDevices = Mapping[str, PodSingleDevice]


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    """The effective per-pod scheduling policy.

    ``node`` is the node policy (``binpack`` or ``spread``, or a plugin policy such as ``fgd``); ``gpu``
    the raw GPU policy string and ``gpu_tokens`` its comma-separated tokens (``binpack``, ``spread``,
    ``numa``, ``mutex``, ``topology-aware``). ``weights`` are the device-score weights (slot, core,
    memory). ``numa_bind`` is set by the engine from the requesting backends (NVIDIA's
    ``nvidia.com/numa-bind``).
    """

    node: str = "binpack"
    gpu: str = "spread"
    gpu_tokens: tuple[str, ...] = ("spread",)
    weights: tuple[int, int, int] = (1, 1, 1)
    numa_bind: bool = False

    def has(self, token: str) -> bool:
        return token in self.gpu_tokens


class FitCandidate:
    """One node offered to ``hami_filter_nodes``.

    ``devices`` are this backend's devices on the node, already sorted by the GPU policy (the preferred
    device is **last**, as in HAMi) and carrying the usage booked so far, including earlier containers
    of the same pod. ``allocated`` is what earlier containers of this pod already got on this node
    (backend name → one tuple per earlier container), for per-pod checks such as quota.
    """

    __slots__ = ("allocated", "devices", "node")

    def __init__(self, node: NodeView, devices: Sequence[DeviceUsage],
                 allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]]) -> None:
        self.node = node
        self.devices = devices
        self.allocated = allocated


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    """One namespace's quota for one resource (spec §11.1).

    ``limit`` is the ``limits.<resource>`` quantity of the namespace's ResourceQuota, in the resource's own units
    (memory before ``ResourceNames.memory_factor``); ``used`` what the scheduler has booked in the namespace, in
    booked units (memory in MiB, i.e. after the factor; cores in percent of a card).
    """

    limit: int
    used: int = 0


class QuotaView:
    """The pod's namespace quota, handed to ``hami_filter_nodes`` when the namespace limits the backend (§11.2).

    ``entries`` maps each resource name with a limit set to its :class:`QuotaEntry`; ``used`` excludes the pod's
    own earlier reservation (it is being scheduled again). ``position`` is the container being fitted (init
    containers first) and ``init_count`` the pod's number of init containers, so a fit can collapse the pod's
    hypothetical usage (:func:`hami_core.plugins.fit.quota_predicate` does it for the standard checklist).
    """

    __slots__ = ("entries", "init_count", "namespace", "position")

    def __init__(self, namespace: str, entries: Mapping[str, QuotaEntry], position: int = 0,
                 init_count: int = 0) -> None:
        self.namespace = namespace
        self.entries = entries
        self.position = position
        self.init_count = init_count

    def limited(self, names: ResourceNames) -> bool:
        """Whether the namespace limits the memory or core resource of a backend with these names."""
        entries = self.entries
        return bool((names.memory and names.memory in entries) or (names.cores and names.cores in entries))

    def fits(self, names: ResourceNames, mem: int, cores: int) -> bool:
        """HAMi ``FitQuota``: would booking ``mem`` MiB and ``cores`` more stay within the limits?

        Memory limits count ``x memory_factor`` (they are written in the resource's units); a limit of 0 set
        explicitly blocks any non-zero use.
        """
        entry = self.entries.get(names.memory) if names.memory else None
        if entry is not None and entry.used + mem > entry.limit * names.memory_factor:
            return False
        entry = self.entries.get(names.cores) if names.cores else None
        return entry is None or entry.used + cores <= entry.limit

    def __repr__(self) -> str:
        return f"QuotaView({self.namespace!r}, {dict(self.entries)!r}, position={self.position})"


@dataclass(frozen=True, slots=True)
class FitResult:
    """Outcome of fitting one container request on one node.

    On success ``devices`` are the chosen devices (booked by the engine: ``used + 1``, ``usedmem``,
    ``usedcores``). Otherwise ``reasons`` holds HAMi reason items such as
    ``"1/2 CardInsufficientMemory"``; the engine joins them with ``", "``.
    """

    code: FilterCode
    devices: tuple[ContainerDevice, ...] = ()
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.code is FilterCode.SUCCESS:
            _require(bool(self.devices), "FitResult", "SUCCESS needs at least one device")
        elif self.code is not FilterCode.SKIP:
            _require(bool(self.reasons), "FitResult", f"{self.code.value} needs at least one reason")

    @property
    def ok(self) -> bool:
        return self.code is FilterCode.SUCCESS

    @property
    def reason(self) -> str:
        return ", ".join(self.reasons)

    @classmethod
    def success(cls, devices: Sequence[ContainerDevice]) -> FitResult:
        return cls(FilterCode.SUCCESS, tuple(devices))

    @classmethod
    def unschedulable(cls, *reasons: str) -> FitResult:
        return cls(FilterCode.UNSCHEDULABLE, (), tuple(reasons))


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Sums over every device of a node (all backends), as HAMi's ``ComputeDefaultScore`` uses them."""

    used: int = 0
    count: int = 0
    usedcores: int = 0
    totalcore: int = 0
    usedmem: int = 0
    totalmem: int = 0


class NodeBatch:
    """Every candidate node of one decision, for ``hami_prescore_nodes``.

    ``nodes[i]`` is a node and ``totals[i]`` its node-wide sums before the pod, as a numpy array with the
    columns ``used, count, usedcores, totalcore, usedmem, totalmem`` (so scorers can be vectorised).

    For scorers that keep per-node caches across decisions: ``rows[i]`` is a stable small integer for
    the node (reused after the node is removed) and ``generations[i]`` changes (to a value never used before) whenever
    the node's devices or usage change, so a value cached at ``(row, generation)`` stays valid while both match.
    ``shapes`` are the pod's requests as the workload mix counts them
    (:class:`~hami_core.engine.workload.Shape`), ``workload`` the current mix snapshot
    (:class:`~hami_core.engine.workload.Workload`), and ``cache`` a dict that lives as long as the
    engine, for plugins' caches (key it by plugin name), and ``host`` the pod's host requests (CPU milli,
    memory MiB: :func:`~hami_core.engine.pods.host_requests`). The engine fills all of these; hand-built
    batches may leave them ``None``.

    ``possible`` (a bool array over ``nodes``, or ``None``): the nodes that passed the engine's capacity prefilter,
    when it fits best-first. The others cannot take the pod and their scores are never read, so a costly scorer
    may skip them (any value will do there).
    """

    __slots__ = ("cache", "generations", "host", "nodes", "possible", "rows", "shapes", "totals", "workload")

    def __init__(self, nodes: Sequence[NodeView], totals: Any, *, rows: Any = None, generations: Any = None,
                 shapes: Sequence[Any] = (), workload: Any = None, cache: dict[str, Any] | None = None,
                 host: tuple[int, int] | None = None, possible: Any = None) -> None:
        self.possible = possible
        self.nodes = nodes
        self.totals = totals
        self.rows = rows
        self.generations = generations
        self.shapes = tuple(shapes)
        self.workload = workload
        self.cache = cache
        self.host = host


class ScoreCandidate:
    """One feasible node offered to ``hami_score_nodes``.

    ``assignment`` is the pod's chosen devices on this node (backend → per-container devices);
    ``previous`` the node's device usage before this pod's app containers (HAMi's snapshot);
    ``totals`` the node-wide sums before this pod.
    """

    __slots__ = ("assignment", "node", "previous", "totals")

    def __init__(self, node: NodeView, assignment: PodDevices, previous: Mapping[str, Sequence[DeviceUsage]],
                 totals: UsageTotals) -> None:
        self.node = node
        self.assignment = assignment
        self.previous = previous
        self.totals = totals


@dataclass(frozen=True, slots=True)
class NodeScore:
    """A raw "higher is better" node score from one plugin.

    ``neutral=True`` declares the value policy-independent (HAMi ``PolicyNeutralScore``): the engine
    multiplies it by +10000 under binpack and -10000 under spread. Otherwise the value is added as is.
    """

    value: float
    neutral: bool = False


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """A scheduling policy a plugin offers, by the name users write in annotations, config and CLIs.

    ``kind`` is ``"node"`` (``hami.io/node-scheduler-policy``: which node) or ``"gpu"``
    (``hami.io/gpu-scheduler-policy``: which devices on the node). A node policy with ``ranks_all_pods``
    also ranks pods that request no managed device (by what their CPU and memory do to the node): the
    engine then lists such a pod's candidates best first, with scores, instead of echoing them.
    """

    name: str
    kind: str
    description: str = ""
    ranks_all_pods: bool = False

    def __post_init__(self) -> None:
        _require(bool(self.name) and "," not in self.name and "/" not in self.name, "PolicyInfo",
                 f"name {self.name!r} must be non-empty and free of ',' and '/'")
        _require(self.kind in ("node", "gpu"), f"PolicyInfo {self.name!r}",
                 f"kind must be node or gpu, not {self.kind!r}")


# --------------------------------------------------------------------------------------------------
# Bind
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockSpec:
    """The node lock a backend needs before binding a pod.

    ``annotation`` is the node annotation (``hami.io/mutex.lock`` for most vendors); ``owned`` whether
    the value carries the owner pod (``<RFC3339>,<ns>,<name>``) or only a time (Cambricon);
    ``expiry_s`` overrides the operator's lock timeout (Cambricon: 120 s).
    """

    annotation: str
    owned: bool = True
    expiry_s: float | None = None


# --------------------------------------------------------------------------------------------------
# Node side
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """What the device plugin's ``Allocate`` hands to one container: env, mounts, device nodes.

    ``annotations`` go to kubelet (the container runtime); ``pod_annotations`` are written on the Pod (see
    ``hami_allocate``). ``rollback`` undoes the hook's side effects when the Allocate call fails after the
    hook returned.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    rollback: Callable[[], None] | None = field(default=None, compare=False, repr=False)


class HealthWatch(Protocol):
    """Result of ``hami_watch_health``: a running device health watch that the device plugin stops on exit.

    ``stop()`` must end the watch's threads and return within a few seconds, and be safe to call twice.
    """

    def stop(self) -> None: ...
