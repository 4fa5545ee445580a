"""The hami plugin contract: every ``hami_*`` hook, with its docstring as the reference manual.

Two kinds of hooks. **Per-backend hooks** take a ``backend`` argument (node devices, health, admission,
requests, filter, allocation annotations, decode, node lock, and the node side): a vendor implements them as
methods of its backend object (:class:`~hami_core.plugins.standard.StandardBackend` subclasses), and the core
calls them on that backend alone (:mod:`hami_core.plugins.relay`), so an implementation never checks whether the
call is for one of its backends; the method omits ``backend`` (it is ``self``). **Broadcast hooks** (backend
declaration, policies, prescore, score, pod bound) reach every plugin; cross-cutting plugins (a policy, a
scorer, a veto) use them, and may wrap a per-backend hook (``@hookimpl(wrapper=True)``) to see every backend's
answer. Implementations may accept a subset of a spec's arguments; arguments are always passed by keyword.
Hooks marked *firstresult* stop at the first non-``None`` result. A module-level implementation of a
per-backend hook in a vendor plugin (the contract before 0.2) still works for one release, with a deprecation
warning; it must then return ``None`` for backends it does not own.

The hot path (one scheduling decision) makes a constant number of hook calls per pod: requests are
generated once per container and backend, and the filter and score hooks receive **every** candidate
node at once. Node-side hooks live in their own section and import nothing heavy, so a scheduler-only
embedding never loads gRPC or NVML.

Phases: registration → inventory → admission → requests → filter → score → reserve/bind → node side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence

    from hami_core.engine.scoring import ScorerDefaults
    from hami_core.engine.workload import Shape
    from hami_core.plugins.dra import DraDevice
    from hami_core.plugins.types import (
        ContainerAllocation,
        ContainerDevice,
        ContainerRequests,
        DeviceBackend,
        DeviceInfo,
        DeviceRequest,
        DeviceUsage,
        FitCandidate,
        FitResult,
        GpuPolicy,
        HealthReport,
        HealthWatch,
        LockSpec,
        Mutation,
        NodeBatch,
        NodeScore,
        PodSingleDevice,
        PolicyInfo,
        QuotaView,
        ScoreCandidate,
    )

PROJECT_NAME = "hami"
_hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# ---------------------------------------------------------------------------------------------- #
# Registration                                                                                   #
# ---------------------------------------------------------------------------------------------- #


@_hookspec
def hami_device_backends(config: Mapping[str, Any]) -> Iterable[DeviceBackend] | None:
    """Declare the vendor backends this plugin provides.

    Phase: registration, once per engine. ``config`` is the whole device configuration (the
    ``device-config.yaml`` mapping: ``nvidia:``, ``cambricon:``, ``iluvatars:``, ``vnpus:`` ...). A plugin
    reads and validates its own section (raising :class:`~hami_core.plugins.errors.ConfigError` that names
    the field) and returns one :class:`DeviceBackend` per backend it enables (Iluvatar: one per chip).
    Return ``None`` or ``[]`` to enable none. Two backends with the same ``name`` are a contract error.
    The manager calls every implementation itself (to know which plugin declared which backend), so
    wrappers on this hook are refused.

    :returns: an iterable of :class:`DeviceBackend`.

    Example::

        @hookimpl
        def hami_device_backends(config):
            section = MyConfig.model_validate(config.get("acme") or {})
            return [DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/npu"),
                                  config=section)]
    """


@_hookspec
def hami_scheduling_policies() -> Iterable[PolicyInfo] | None:
    """Declare the scheduling policies this plugin implements, so tools can list and validate them.

    Phase: registration. Every plugin may answer; the answers are concatenated. The built-in plugin
    declares HAMi's node policies (``binpack``, ``spread``) and GPU policies (``binpack``, ``spread``,
    ``mutex``, ``numa``, ``topology-aware``). A policy plugin declares its name here and acts on it in
    the score hooks (``policy.node``) or the filter hook (``policy.gpu_tokens``); ``hami simulate
    --policy`` then offers it with no simulator change.

    :returns: an iterable of :class:`PolicyInfo`.

    Example::

        @hookimpl
        def hami_scheduling_policies():
            return [PolicyInfo("fgd", "node", "least growth of expected GPU fragmentation")]
    """


@_hookspec
def hami_policy_setup(config: Any, state: MutableMapping[str, Any]) -> None:
    """Set up what a scheduling policy keeps for one engine, from its own section of the configuration.

    Phase: registration, once per engine, after its configuration is validated. ``config`` is the engine's
    ``scheduler:`` section (:class:`~hami_core.engine.config.SchedulerConfig`): HAMi's settings and the sections
    that policy packages mount on it (the built-in ``fgd`` policy reads ``config.fgd``; a package declares its
    sections in :mod:`hami_core.policies`). ``state`` is the engine's plugin state: keep yours under your plugin's
    name. The engine hands the same mapping to :func:`hami_observe_pod`, :func:`hami_order_devices` and
    :func:`hami_score_defaults` as ``state``, and to :func:`hami_prescore_nodes` as ``batch.workload``. Every
    plugin is called. Returns nothing.

    Example::

        @hookimpl
        def hami_policy_setup(config, state):
            state["acme"] = AcmeModel(config.acme.window)
    """


# ---------------------------------------------------------------------------------------------- #
# Inventory (outside the scheduling cycle: node add/update, the registration loop)              #
# ---------------------------------------------------------------------------------------------- #


@_hookspec(firstresult=True)
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> Sequence[DeviceInfo] | None:
    """Parse a Kubernetes Node (plain JSON dict) into this backend's devices (HAMi ``GetNodeDevices``).

    Phase: inventory. Stops at the first non-``None`` result. Return ``None`` for a backend you do not
    own and ``[]`` when the node carries no registration for it (not an error: the node simply has
    none of these devices). Raise :class:`~hami_core.plugins.errors.WireFormatError` naming the
    annotation when the registration is malformed; the engine then keeps the node's previous devices
    for this backend and reports the error.

    :returns: the devices, each with ``vendor`` left empty (the engine stamps it).

    Example::

        @hookimpl
        def hami_node_devices(backend, node):
            if backend.name != "ACME":
                return None
            raw = node["metadata"].get("annotations", {}).get(backend.register_annotation)
            return [] if raw is None else decode_node_devices(raw)
    """


@_hookspec(firstresult=True)
def hami_node_health(
    backend: DeviceBackend,
    node: Mapping[str, Any],
    devices: Sequence[DeviceInfo],
    now: float,
    state: MutableMapping[str, Any],
) -> HealthReport | None:
    """Decide whether the node's registration for this backend is alive (HAMi ``CheckHealth``).

    Phase: inventory, after :func:`hami_node_devices`. Stops at the first non-``None`` result; when no
    plugin answers, the default plugin applies HAMi's generic handshake rule: a
    ``Requesting_<time>`` mark older than 60 s with no allocatable devices is stale. ``now`` is the
    engine clock (Unix seconds); ``state`` a per-engine, per-backend scratch mapping for bookkeeping
    across calls (NVIDIA remembers the last allocatable count and register annotation per node).
    A report with ``healthy=False`` drops the backend's devices from the node.

    :returns: :class:`HealthReport`; its ``annotations`` are a merge patch the caller writes to the Node.
    """


@_hookspec
def hami_node_removed(backend: DeviceBackend, node_name: str, state: MutableMapping[str, Any]) -> None:
    """Forget per-node bookkeeping when a node leaves or turns unhealthy (HAMi ``NodeCleanUp``).

    Phase: inventory. Called for every backend; must be idempotent and must not raise. Returns nothing.
    """


# ---------------------------------------------------------------------------------------------- #
# Admission (mutating webhook, before the pod reaches kube-scheduler)                           #
# ---------------------------------------------------------------------------------------------- #


@_hookspec(firstresult=True)
def hami_mutate_container(
    backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]
) -> Mutation | None:
    """Apply this backend's admission defaults to one container (HAMi ``MutateAdmission``).

    Phase: admission; called for every init container, then every app container, for every backend.
    ``pod`` and ``container`` are the engine's private copies and may be changed in place (limits,
    env, ``spec.runtimeClassName``). Stops at the first non-``None`` result. Raise
    :class:`~hami_core.plugins.errors.AdmissionFailed` to reject the pod with an error that names the
    container and resource.

    :returns: :class:`Mutation` telling whether the container requests this backend.
    """


# ---------------------------------------------------------------------------------------------- #
# Requests (PreFilter)                                                                           #
# ---------------------------------------------------------------------------------------------- #


@_hookspec(firstresult=True)
def hami_container_request(
    backend: DeviceBackend, pod: Mapping[str, Any], container: Mapping[str, Any]
) -> DeviceRequest | None:
    """Turn one container's resources into a request for this backend (``GenerateResourceRequests``).

    Phase: requests, once per container and backend per scheduling decision. Stops at the first
    non-``None`` result; return ``None`` when the container does not use the backend (HAMi's
    ``Nums == 0``), including when its quantities are unusable (HAMi drops such requests).

    :returns: :class:`DeviceRequest` with ``backend`` set to ``backend.name``.
    """


@_hookspec
def hami_observe_pod(key: str, shapes: Sequence[Shape], host: tuple[int, int], state: MutableMapping[str, Any]) -> None:
    """Event: the engine is about to decide where a pod with device requests goes; for policies that learn.

    Phase: requests, once per :meth:`Engine.schedule <hami_core.engine.facade.Engine.schedule>` call of a pod that
    requests managed devices, before any node is looked at (a pod scheduled again is observed again: count it once
    by ``key``, its UID, else ``namespace/name``). ``shapes`` are its requests, one
    :class:`~hami_core.engine.workload.Shape` per (container, backend) request with the pod's type selections;
    ``host`` its CPU (milli) and memory (MiB) requests; ``state`` the engine's plugin state
    (:func:`hami_policy_setup`). The built-in ``fgd`` policy counts the pod in its request mix here and takes the
    mix snapshot the decision's other hooks read. Every plugin is called; return values are ignored, and an
    exception fails the decision, so keep implementations cheap.
    """


# ---------------------------------------------------------------------------------------------- #
# Filter (batched over candidate nodes)                                                          #
# ---------------------------------------------------------------------------------------------- #


@_hookspec(firstresult=True)
def hami_order_devices(
    pod: Mapping[str, Any],
    node: Any,
    request: DeviceRequest,
    shape: Shape | None,
    host: tuple[int, int],
    devices: Sequence[DeviceUsage],
    ordered: list[DeviceUsage],
    policy: GpuPolicy,
    state: Mapping[str, Any],
) -> Sequence[DeviceUsage] | None:
    """Order one node's devices for one container's fit under a GPU policy token that is not HAMi's own.

    Phase: filter, per candidate node and container request, before :func:`hami_filter_nodes`; called only for
    pods whose GPU policy has a token outside HAMi's (``binpack``, ``spread``, ``numa``, ``mutex``,
    ``topology-aware``), such as the built-in ``fgd``. ``ordered`` is the node's devices of ``request.backend`` in
    the HAMi order the token starts from (preferred device **last**, as the fit walks them); ``devices`` the same
    devices in registration order; both carry the usage of the pod's earlier containers (``devices`` is then a copy,
    not ``node.devices[backend]``). ``node`` is the engine's node state: a NodeView that also has ``generation``
    (changes whenever its devices or usage change), ``order_cache`` (a dict for per-node results, stored as
    ``(generation, value)``) and ``host_total``/``host_used`` (CPU milli, memory MiB). ``shape`` is the request as
    :func:`hami_observe_pod` saw it, ``host`` the pod's CPU and memory, ``state`` the engine's plugin state. Stops
    at the first non-``None`` result; return ``None`` to keep ``ordered``.

    :returns: the same devices reordered (preferred last), or ``None``.
    """


@_hookspec(firstresult=True)
def hami_filter_nodes(
    backend: DeviceBackend,
    pod: Mapping[str, Any],
    request: DeviceRequest,
    candidates: Sequence[FitCandidate],
    policy: GpuPolicy,
    quota: QuotaView | None,
) -> Sequence[FitResult] | None:
    """Fit one container's request onto each candidate node's devices (HAMi ``Fit``), all nodes at once.

    Phase: filter; one call per container and requested backend, whatever the number of nodes.
    Each candidate's ``devices`` are sorted by the GPU policy with the preferred device **last**; walk
    them from the end, as HAMi does. The standard checklist is
    :func:`hami_core.plugins.fit.standard_fit`; vendors call it with their own rules. Stops at the first
    non-``None`` result, so a non-vendor plugin that wants to veto nodes wraps this hook
    (``@hookimpl(wrapper=True)``) and edits the results.

    ``quota`` is the pod's namespace ResourceQuota (:class:`QuotaView`) when the namespace limits this
    backend's memory or core resource, else ``None``. A vendor that enforces quota inside its fit (HAMi: NVIDIA,
    Cambricon) accepts the argument and passes
    ``quota_predicate(quota, backend, candidate)`` (:func:`hami_core.plugins.fit.quota_predicate`) as
    ``standard_fit``'s ``quota``, which refuses a device with ``ResourceQuotaNotFit`` when the pod's hypothetical
    usage would exceed a limit. Implementations may omit the argument (pluggy passes only what they name).

    :returns: one :class:`FitResult` per candidate, in the same order.
    """


# ---------------------------------------------------------------------------------------------- #
# Score (batched over feasible nodes)                                                            #
# ---------------------------------------------------------------------------------------------- #


@_hookspec
def hami_score_defaults(policy: GpuPolicy, state: Mapping[str, Any]) -> Mapping[str, ScorerDefaults] | None:
    """Declare how scorers weigh under the pod's node policy by default, and the scale of your own scorers.

    Phase: score, once per decision. A *scorer* is one plugin's score answers (see
    :mod:`hami_core.engine.scoring`): ``hami`` for HAMi's node score, a backend object's backend name, a module
    plugin's registered name (or its ``HAMI_SCORER`` attribute), ``<name>.neutral`` for its
    ``NodeScore(neutral=True)`` answers. The engine adds, per node, ``weight x value / scale`` of every scorer (its
    direction reversed under ``spread`` unless neutral). Answer ``{scorer: ScorerDefaults(weight, scale)}``:
    ``scale`` is the points of a full score of your scorer (so ``value / scale`` is 0..1); ``weight`` the default
    weight of any scorer under ``policy`` (a node policy whose score includes its own tie-break turns HAMi's off:
    ``{"hami": ScorerDefaults(weight=0)}``). ``None`` fields say nothing; a weight nobody gives is the scorer's
    own points (``weight = scale``; 10000 points per unit for neutral scorers), which is HAMi's arithmetic. Every
    plugin may answer; later answers win, and the operator's ``scheduler.scoreWeights`` come last (HAMi's built-in
    score plugin, ``trylast``). ``state`` is the engine's plugin state (:func:`hami_policy_setup`).

    :returns: a mapping of scorer name to :class:`~hami_core.engine.scoring.ScorerDefaults`, or ``None``.
    """


@_hookspec
def hami_prescore_nodes(pod: Mapping[str, Any], batch: NodeBatch, policy: GpuPolicy) -> Sequence[float] | None:
    """Score every candidate node from its state alone, before any fit (the framework's PreScore).

    Phase: score; one call per pod, over all candidates. Every plugin may answer; the engine weighs each
    plugin's answer as its scorer (:func:`hami_score_defaults`; by default it adds the raw values, "higher is
    better", one number per ``batch.nodes`` entry, or a numpy array) into the :func:`hami_score_nodes` totals.
    The default plugin contributes HAMi's default node score (scorer ``hami``) from ``batch.totals``. A scorer
    weighing 0 is not called. ``batch.workload`` is the engine's plugin state (:func:`hami_policy_setup`).
    Because these scores do not depend on where the pod's devices would go, the
    engine can fit nodes best-first and stop at the first that fits when no plugin implements
    :func:`hami_score_nodes` (``Engine.schedule(..., limit=1)``). It then applies its capacity prefilter first:
    when no candidate has the capacity this hook is not called, and otherwise ``batch.possible`` marks the
    candidates it kept; the others' scores are never read, so a costly scorer may skip them.

    :returns: one float per node in ``batch.nodes`` order, or ``None``.
    """


@_hookspec
def hami_score_nodes(
    pod: Mapping[str, Any], candidates: Sequence[ScoreCandidate], policy: GpuPolicy
) -> Sequence[NodeScore | None] | None:
    """Score every feasible node (HAMi ``ComputeDefaultScore`` + ``ScoreNode``).

    Phase: score; one call per pod. Every plugin may answer; the engine adds up all answers per node
    (``None`` for a node or for the whole call contributes nothing), each weighed as its scorer's
    (:func:`hami_score_defaults`). Values are raw, "higher is better"; the engine applies the node policy (binpack
    picks the highest total, spread the lowest). A ``NodeScore(neutral=True)`` belongs to the scorer
    ``<name>.neutral``, which the node policy does not reverse; unweighed, it counts 10000 points per unit (reported
    as -10000 under spread, whose figures are lowest-best). Scores that need only the node's state belong in
    :func:`hami_prescore_nodes`, which keeps best-first evaluation possible: a vendor plugin implementing this
    hook makes decisions for pods that request its backends fit every node, and any other plugin implementing it
    does so for every pod. A vendor returns ``None`` for candidates whose assignment has none of its backends.

    :returns: one :class:`NodeScore` (or ``None``) per candidate, in order, or ``None``.
    """


# ---------------------------------------------------------------------------------------------- #
# Reserve / bind                                                                                  #
# ---------------------------------------------------------------------------------------------- #


@_hookspec
def hami_allocation_annotations(
    backend: DeviceBackend, pod: Mapping[str, Any], devices: PodSingleDevice, node: str, now: float
) -> Mapping[str, str] | None:
    """Pod annotations that record this backend's devices for the chosen node (``PatchAnnotations``).

    Phase: after a node is chosen, once per backend the pod uses. ``devices`` has one entry per pod
    container (init first), empty for containers without this backend; ``node`` is the chosen node and
    ``now`` the decision time (engine clock, Unix seconds; the same instant as ``hami.io/vgpu-time``).
    Every plugin may answer and the answers are merged (later plugins win on equal keys); the default plugin writes the
    backend's ``to_allocate_annotation`` and ``allocated_annotation`` in HAMi's encoding.

    :returns: a mapping of annotation key to value, or ``None``.
    """


@_hookspec(firstresult=True)
def hami_decode_allocation(backend: DeviceBackend, pod: Mapping[str, Any]) -> PodSingleDevice | None:
    """Read back the devices a scheduled pod holds on this backend, to rebuild usage after a restart.

    Phase: inventory (pod add/update). Stops at the first non-``None`` result; the default plugin
    decodes ``backend.allocated_annotation``. Return ``None`` when the pod holds nothing of this
    backend; raise :class:`~hami_core.plugins.errors.WireFormatError` when the value cannot be decoded
    (the engine then quarantines the node rather than silently losing the allocation).

    :returns: one tuple of devices per container position.
    """


@_hookspec(firstresult=True)
def hami_node_lock(backend: DeviceBackend, pod: Mapping[str, Any], requests: ContainerRequests) -> LockSpec | None:
    """The node lock bind must hold for this pod and backend (HAMi ``LockNode``/``ReleaseNodeLock``).

    Phase: bind. Stops at the first non-``None`` result; the default plugin (``trylast``) returns
    ``LockSpec(backend.lock_annotation)`` when an **app** container requests the backend (HAMi does not
    lock for init-only pods). Return ``None`` for "no lock needed". The cluster adapter performs the
    compare-and-swap on the Node.

    :returns: :class:`LockSpec` or ``None``.
    """


@_hookspec
def hami_pod_bound(pod: Mapping[str, Any], node: str) -> None:
    """Event: the pod was bound to ``node``; for metrics, audit and cache warm-up.

    Phase: bind, after the binding succeeded (the in-memory cluster calls it right after setting
    ``spec.nodeName``). ``pod`` carries the decision annotations. Every plugin is called; return values
    are ignored, and an exception propagates to the binder, so keep implementations cheap and safe.

    Example::

        @hookimpl
        def hami_pod_bound(pod, node):
            BOUND.labels(node=node).inc()
    """


# ---------------------------------------------------------------------------------------------- #
# Node side (device plugin). Declared here; implemented by vendors with a device plugin.         #
# ---------------------------------------------------------------------------------------------- #


@_hookspec(firstresult=True)
def hami_discover_devices(backend: DeviceBackend) -> Sequence[DeviceInfo] | None:
    """Discover this backend's devices on the local node (NVML for NVIDIA) for registration.

    Phase: node side. Stops at the first non-``None`` result. Must not crash the process when the
    driver is missing: return ``[]`` and log.

    :returns: the devices to advertise and register.
    """


@_hookspec(firstresult=True)
def hami_watch_health(
    backend: DeviceBackend, devices: Sequence[DeviceInfo], on_health: Callable[[str, bool], None]
) -> HealthWatch | None:
    """Start watching the health of this backend's local devices (NVIDIA: NVML XID events).

    Phase: node side, once per device-plugin start, after :func:`hami_discover_devices` found at least
    one device. Stops at the first non-``None`` result. ``devices`` are the discovered devices; the
    watch calls ``on_health(device_id, healthy)`` (``device_id`` is a ``DeviceInfo.id``) from its own
    thread whenever a device's health changes, and the device plugin then re-sends its ListAndWatch
    list (every replica of the device ``Unhealthy``) and re-writes the node registration annotation;
    ``healthy=True`` brings a device back (HAMi's NVIDIA plugin never does). ``on_health`` is cheap,
    thread-safe, and ignores (with a warning) an id that was not discovered. Return ``None`` when there
    is nothing to watch (checks disabled by configuration, fake devices, no driver): the devices then
    stay ``Healthy``. An exception is logged and the plugin serves with health checks off; it never
    stops the plugin.

    :returns: a started :class:`HealthWatch`; the device plugin calls its ``stop()`` when it stops.

    Example::

        @hookimpl
        def hami_watch_health(backend, devices, on_health):
            if backend.name != "ACME":
                return None
            watch = AcmeEventWatch([d.id for d in devices], on_error=lambda dev: on_health(dev, False))
            watch.start()  # a daemon thread; watch.stop() sets an event and joins it
            return watch
    """


@_hookspec(firstresult=True)
def hami_allocate(
    backend: DeviceBackend, pod: Mapping[str, Any], container_index: int, devices: Sequence[ContainerDevice]
) -> ContainerAllocation | None:
    """Build what kubelet's ``Allocate`` returns for one container (env, mounts, device nodes).

    Phase: node side. ``devices`` are the container's entries popped from the to-allocate annotation.
    Stops at the first non-``None`` result. ``pod`` is the pod as read at the start of the Allocate call,
    with the ``pod_annotations`` of the call's earlier containers already applied.

    Writing to the pod: the hook never patches the pod itself. It returns the annotations to set in
    ``ContainerAllocation.pod_annotations``; the device plugin merge-patches them onto the pod in the same
    patch that consumes the to-allocate slots, with the pod's ``metadata.resourceVersion`` as a precondition
    (a pod changed meanwhile fails the call), before kubelet gets the answer. A hook with side effects
    (NVIDIA dynamic MIG creates GPU instances) returns ``ContainerAllocation.rollback``: the device plugin
    calls it, newest first, when the call fails after the hook returned (a later container's hook raised,
    the patch failed). A hook that fails raises an exception whose message names the pod and the field; it
    undoes its own partial work first. While the hook runs, :func:`hami_core.plugins.node_context.current` gives the
    node name, a reader of the node's pods and a per-plugin state bag.

    :returns: :class:`ContainerAllocation`.
    """


# ---------------------------------------------------------------------------------------------- #
# DRA (resource.k8s.io/v1): how a backend describes its devices in ResourceSlices.               #
# ---------------------------------------------------------------------------------------------- #


@_hookspec(firstresult=True)
def hami_dra_devices(backend: DeviceBackend, devices: Sequence[DeviceInfo]) -> Sequence[DraDevice] | None:
    """Describe this backend's devices on one node for DRA: the devices of its ResourceSlices.

    Phase: node side (``hami dra-driver`` publishing, and its ``--dry-run``), once per publication pass, with every
    device of the backend on the node: what :func:`hami_discover_devices` found, or what the node's registration
    annotation lists (:func:`hami_node_devices`), each with its current ``health``. Stops at the first
    non-``None`` result; when no plugin answers (a backend that is no
    :class:`~hami_core.plugins.standard.StandardBackend`), the core applies the standard description,
    :func:`~hami_core.plugins.standard.standard_dra_devices`, which is also the base class's implementation: one
    :class:`~hami_core.plugins.dra.DraDevice` per device (``index``, ``id`` as ``uuid``, ``type``, ``numa``,
    ``mode``), consumable capacities ``memory`` (``devmem`` MiB, in bytes; a claim naming none takes the whole
    card, as a HAMi request without memory does) and ``cores`` (``devcore``; default the backend's
    ``default_cores``), and, on a device with ``count > 1``, ``shared=True`` with ``shares`` = ``count`` (each
    allocation consumes one, so DRA places no more claims on a card than HAMi's split count); an unhealthy device
    is returned with ``healthy=False`` (the publisher withdraws it). A vendor overrides it to add its attributes
    (NVIDIA: the ``mode``, ``hami-core``/``mps``/``mig``), publish whole-card-only devices as not shared (NVIDIA's
    MIG-mode cards), or change the capacities' units and request policies (AMD: compute in percent of the CUs).

    The answer is published as is: device names come from ``DraDevice.name`` (``<word>-<index>``), so two
    devices with the same ``index`` are an error naming both; the core qualifies attribute names by the driver
    name and checks the API server's limits (string values of at most 64 characters, 32 attributes and capacities
    per device) before publishing, refusing the pass with an error that names the device and the field.

    :returns: one :class:`~hami_core.plugins.dra.DraDevice` per device (unhealthy ones included, marked), or
        ``None``.

    Example::

        def hami_dra_devices(self, devices):  # a StandardBackend method
            out = standard_dra_devices(self, devices)
            return [replace(d, attributes={"firmware": fw_version(d.uuid)}) for d in out]
    """
