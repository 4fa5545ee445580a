"""The Alibaba GPU-sharing trace "openb" (cluster-trace-gpu-v2023) as Kubernetes Nodes and Pods.

Mapping (traces/openb/README.md): a task with ``num_gpu = 1`` and ``gpu_milli < 1000`` asks for one
shared GPU with ``nvidia.com/gpucores = gpumem-percentage = gpu_milli / 10``; ``num_gpu = k`` with
``gpu_milli = 1000`` asks for ``k`` whole GPUs (admission makes them exclusive); ``gpu_spec`` (models
separated by ``|``) becomes ``nvidia.com/use-gputype``. Nodes register ``gpu`` NVIDIA devices of type
``NVIDIA-<model>`` and keep their CPU and memory; tasks keep their CPU and memory requests.

Cite: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC '23.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_core.sim.loader import InputError
from hami_core.wire import keys

log = logging.getLogger("hami.sim")

#: Device memory registered per GPU model (MiB). Requests are percentages, so this only sets the scale.
MODEL_MEMORY_MIB = {"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576,
                    "G2": 24576, "G3": 24576}
DEFAULT_MEMORY_MIB = 16384
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
#: The trace's ``qos`` column as a pod priority (what ``hami simulate --preemption`` ranks victims by): the
#: latency-sensitive online services (LS) and Guaranteed pods outrank Burstable ones, which outrank best-effort
#: batch work (BE). The trace publishes no priorities of its own; an unknown class counts as BE.
QOS_PRIORITY = {"LS": 2000, "Guaranteed": 2000, "Burstable": 1000, "BE": 0}


@dataclass(frozen=True, slots=True)
class Task:
    """One trace task: what it asks for, before it becomes a Pod."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str = ""
    qos: str = ""

    @property
    def gpu_demand(self) -> int:
        """GPU milli the task asks for in total (whole GPUs count 1000 each)."""
        return self.num_gpu * self.gpu_milli if self.num_gpu else 0

    @property
    def per_gpu(self) -> int:
        """GPU milli asked of each GPU (1000 for whole GPUs, 0 for CPU-only tasks)."""
        return self.gpu_milli if self.num_gpu else 0


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


class RowError(InputError):
    """A CSV row that cannot be used; names the file, line and field."""


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read trace file {path}: {exc.strerror or exc}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise InputError(f"{path}:1: missing column(s) {', '.join(missing)} "
                             f"(expected at least {', '.join(required)})")
        for row in reader:
            yield reader.line_num, row


def _int(path: Path, line: int, row: dict[str, str], field: str, *, low: int = 0) -> int:
    raw = (row.get(field) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise RowError(f"{path}:{line}: field {field!r} must be an integer, got {raw!r}") from None
    if value < low:
        raise RowError(f"{path}:{line}: field {field!r} must be >= {low}, got {value}")
    return value


def _collect(rows: Iterator[tuple[int, Any]], parse: Any, *, strict: bool, skipped: list[str]) -> list[Any]:
    out = []
    for line, row in rows:
        try:
            out.append(parse(line, row))
        except RowError as exc:
            if strict:
                raise
            skipped.append(str(exc))
            log.warning("skipped: %s", exc)
    return out


def load_nodes(path: str | Path, *, strict: bool = False, skipped: list[str] | None = None) -> list[TraceNode]:
    """Nodes of ``openb_node_list_gpu_node.csv``; bad rows are skipped (or raise with ``strict``)."""
    p = Path(path)

    def parse(line: int, row: dict[str, str]) -> TraceNode:
        name = (row.get("sn") or "").strip()
        if not name:
            raise RowError(f"{p}:{line}: field 'sn' is empty")
        model = (row.get("model") or "").strip()
        gpus = _int(p, line, row, "gpu")
        if gpus and not model:
            raise RowError(f"{p}:{line}: field 'model' is empty for a node with {gpus} GPUs")
        return TraceNode(name, _int(p, line, row, "cpu_milli"), _int(p, line, row, "memory_mib"), gpus, model)

    return _collect(_rows(p, NODE_COLUMNS), parse, strict=strict, skipped=skipped if skipped is not None else [])


def load_tasks(path: str | Path, *, strict: bool = False, skipped: list[str] | None = None) -> list[Task]:
    """Tasks of an ``openb_pod_list_*.csv`` (``gpu_spec`` is optional, as in ``multigpu50``)."""
    p = Path(path)

    def parse(line: int, row: dict[str, str]) -> Task:
        name = (row.get("name") or "").strip()
        if not name:
            raise RowError(f"{p}:{line}: field 'name' is empty")
        num_gpu = _int(p, line, row, "num_gpu")
        milli = _int(p, line, row, "gpu_milli")
        if num_gpu and not 0 < milli <= 1000:
            raise RowError(f"{p}:{line}: field 'gpu_milli' must be in 1..1000 for a GPU task, got {milli}")
        if num_gpu > 1 and milli != 1000:
            raise RowError(f"{p}:{line}: field 'gpu_milli' must be 1000 for a {num_gpu}-GPU task, got {milli}")
        if milli % 10:
            raise RowError(f"{p}:{line}: field 'gpu_milli' must be a multiple of 10 (1 % of a GPU), got {milli}")
        return Task(name, _int(p, line, row, "cpu_milli"), _int(p, line, row, "memory_mib"), num_gpu,
                    milli if num_gpu else 0, (row.get("gpu_spec") or "").strip(), (row.get("qos") or "").strip())

    return _collect(_rows(p, POD_COLUMNS), parse, strict=strict, skipped=skipped if skipped is not None else [])


def node_object(node: TraceNode, *, split_count: int = 10) -> dict[str, Any]:
    """A Kubernetes Node registering the trace node's GPUs as HAMi's NVIDIA device plugin would."""
    devmem = MODEL_MEMORY_MIB.get(node.model, DEFAULT_MEMORY_MIB)
    devices = [{"id": f"GPU-{node.name}-{i}", "index": i, "count": split_count, "devmem": devmem, "devcore": 100,
                "type": f"NVIDIA-{node.model}", "mode": "hami-core", "health": True} for i in range(node.gpus)]
    annotations = {keys.NODE_NVIDIA_REGISTER: json.dumps(devices, separators=(",", ":"))} if devices else {}
    resources = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi"}
    if devices:
        resources[keys.NVIDIA_RESOURCE_COUNT] = str(split_count * node.gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": {"hami.io/gpu-model": node.model},
                         "annotations": annotations},
            "status": {"capacity": dict(resources), "allocatable": resources}}


def pod_object(task: Task, *, uid: str | None = None) -> dict[str, Any]:
    """A Kubernetes Pod asking for what the task asks, in HAMi's resources (module docstring)."""
    container: dict[str, Any] = {"name": "main", "image": "trace",
                                 "resources": {"requests": {"cpu": f"{task.cpu_milli}m",
                                                            "memory": f"{task.memory_mib}Mi"}}}
    annotations: dict[str, str] = {}
    if task.num_gpu:
        limits: dict[str, str] = {keys.NVIDIA_RESOURCE_COUNT: str(task.num_gpu)}
        if task.gpu_milli < 1000:
            share = str(task.gpu_milli // 10)
            limits[keys.NVIDIA_RESOURCE_CORES] = share
            limits[keys.NVIDIA_RESOURCE_MEMORY_PERCENTAGE] = share
        container["resources"]["limits"] = limits
        if task.gpu_spec:
            annotations[keys.NVIDIA_USE_GPUTYPE] = ",".join(m for m in task.gpu_spec.split("|") if m)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": task.name, "namespace": "openb", "uid": uid or task.name,
                         "annotations": annotations},
            "spec": {"containers": [container], "priority": QOS_PRIORITY.get(task.qos, 0)}}
