"""Annotation and label keys of the HAMi wire protocol (spec §3.1, NVIDIA names) and their value constants."""

from __future__ import annotations

from hami_core.plugins.errors import WireFormatError

# -- pod annotations written by the scheduler ----------------------------------------------------------
#: Node chosen at Filter (also written as a pod label with the same key).
VGPU_NODE = "hami.io/vgpu-node"
#: Unix seconds of the Filter decision.
VGPU_TIME = "hami.io/vgpu-time"
#: NVIDIA assignment consumed by the device plugin (PodSingleDevice encoding).
VGPU_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
#: NVIDIA assignment, never rewritten; source of truth for usage reconstruction.
VGPU_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
#: MIG allocations JSON.
VGPU_MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
BIND_PHASE_ALLOCATING = "allocating"
BIND_PHASE_SUCCESS = "success"
BIND_PHASE_FAILED = "failed"

# -- pod annotations read by the scheduler (user-set) --------------------------------------------------
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
NVIDIA_USE_GPUTYPE = "nvidia.com/use-gputype"
NVIDIA_NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
NVIDIA_USE_GPUUUID = "nvidia.com/use-gpuuuid"
NVIDIA_NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
NVIDIA_NUMA_BIND = "nvidia.com/numa-bind"
NVIDIA_VGPU_MODE = "nvidia.com/vgpu-mode"

# -- node annotations ----------------------------------------------------------------------------------
NODE_NVIDIA_REGISTER = "hami.io/node-nvidia-register"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_NVIDIA_SCORE = "hami.io/node-nvidia-score"
NODE_LOCK = "hami.io/mutex.lock"
DEVICE_CORDON = "hami.io/device-cordon"

# -- labels ----------------------------------------------------------------------------------------------
WEBHOOK_LABEL = "hami.io/webhook"
WEBHOOK_IGNORE = "ignore"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER_ROLE_LABEL = "hami.io/scheduler-role"
SCHEDULER_ROLE_LEADER = "leader"
SCHEDULER_ROLE_FOLLOWER = "follower"
COMPONENT_LABEL = "app.kubernetes.io/component"
DEFAULT_SCHEDULER_NAME = "hami-scheduler"

# -- NVIDIA container resources (protocol meaning, not annotations) -------------------------------------
NVIDIA_RESOURCE_COUNT = "nvidia.com/gpu"
NVIDIA_RESOURCE_MEMORY = "nvidia.com/gpumem"
NVIDIA_RESOURCE_MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
NVIDIA_RESOURCE_CORES = "nvidia.com/gpucores"
NVIDIA_RESOURCE_PRIORITY = "nvidia.com/priority"


def nouse_key(use_key: str) -> str:
    """Derive a deny-list key from its allow-list key (spec §3.8).

    Format: the name part after the last ``/`` starting with ``use`` becomes ``nouse``
    (``nvidia.com/use-gputype`` → ``nvidia.com/nouse-gputype``), except the ``hami.io/use-<x>-uuid``
    family, where ``use-`` becomes ``no-use-`` (``hami.io/use-xpu-uuid`` → ``hami.io/no-use-xpu-uuid``).
    """
    prefix, slash, name = use_key.rpartition("/")
    if prefix == "hami.io" and name.startswith("use-") and name.endswith("-uuid"):
        return f"{prefix}{slash}no-{name}"
    if name.startswith("use"):
        return f"{prefix}{slash}no{name}"
    raise WireFormatError(f"{use_key!r} is not a 'use' selection key")
