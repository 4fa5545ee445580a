"""The workload mix of a task list, given to the ``fgd`` policy up front (``hami simulate --fgd-mix trace``).

The FGD paper's simulator knows the workload before it places anything: its *typical pods* are the distinct
requests of the whole trace, CPU-only ones included, most popular first until they cover 95 % of the tasks,
their weights renormalised to sum to 1 (hkust-adsl/kubernetes-scheduler-simulator, ``GetTypicalPods``;
``--fgd-mix paper``). ``--fgd-mix trace`` keeps each class's share of all tasks instead.
This builds the same mix in the engine's terms, as ``scheduler.fgd.workload`` classes: one per request shape
and exact CPU request (memory is the class mean), pods without devices as ``nums: 0`` classes. The online model
(the default) learns a mix from the pods it has seen instead; docs/simulation.md compares the two.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from hami_core.engine.facade import Engine
from hami_core.engine.pods import host_requests
from hami_core.engine.workload import DEVICELESS, Shape, pod_shapes
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET
from hami_core.policies.fgd.config import FgdClass
from hami_core.sim.workload import SimPod

__all__ = ["MIX_SOURCES", "trace_mix", "write_mix"]

#: ``--fgd-mix``: learned from the pods seen (``online``), or the task list's classes given up front, weighted by
#: their share of all tasks (``trace``) or renormalised to sum to 1 as the FGD paper's simulator does (``paper``).
MIX_SOURCES = ("online", "trace", "paper")


def trace_mix(engine: Engine, tasks: Sequence[SimPod], coverage: float, *,
              normalise: bool = False) -> list[dict[str, Any]]:
    """``scheduler.fgd.workload`` entries for ``tasks``: the most popular classes covering ``coverage`` of them,
    each weighted by its share of all tasks, so the weights sum to about ``coverage``. (The FGD paper's simulator
    renormalises its kept classes to sum to 1; keeping the shares scored better on the openb gpuspec33 trace,
    docs/simulation.md.) ``normalise``: divide them by their sum, as that simulator's ``GetTypicalPods`` does. Pods the
    webhook would refuse are not counted."""
    counts: Counter[tuple[Shape, int]] = Counter()
    memory: Counter[tuple[Shape, int]] = Counter()
    pods = 0
    for task in tasks:
        try:
            pod = engine.admit(task.pod)
        except (AdmissionDenied, AdmissionFailed):
            continue
        pods += 1
        cpu, mem = host_requests(pod)
        for shape in pod_shapes(pod, engine.requests(pod), engine.backends) or (DEVICELESS,):
            counts[(shape, cpu)] += 1
            memory[(shape, cpu)] += mem
    out: list[dict[str, Any]] = []
    covered = 0.0
    for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], repr(kv[0]))):
        if covered >= coverage:
            break
        covered += n / pods
        out.append(_entry(key[0], n / pods, key[1], memory[key] / n))
    if normalise and covered:
        for entry in out:
            entry["weight"] /= covered
    return out


def _entry(shape: Shape, weight: float, cpu: int, mem: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"nums": shape.nums, "weight": weight, "cpu_milli": cpu, "host_memory": mem}
    if shape.deviceless:
        return entry
    entry.update(backend=shape.backend, cores=shape.cores, memory=shape.memreq, types=shape.use_types,
                 nouse_types=shape.nouse_types)
    if 0 <= shape.mem_percentage < MEM_PERCENTAGE_UNSET:  # a vendor's own marker (Enflame: -1) means none given
        entry["mem_percentage"] = shape.mem_percentage
    return entry


def write_mix(path: str | Path, mix: Sequence[Mapping[str, Any]]) -> None:
    """Write ``mix`` as a config file holding only ``scheduler.fgd.workload`` (the config's own field names), to
    merge into a scheduler's config; defaults are left out."""
    classes = [FgdClass.model_validate(entry).model_dump(mode="json", by_alias=True, exclude_defaults=True)
               for entry in mix]
    for c in classes:  # whole numbers read better in YAML
        for key in ("cpuMilli", "hostMemoryMiB"):
            if isinstance(c.get(key), float) and c[key].is_integer():
                c[key] = int(c[key])
    header = ("# scheduler.fgd.workload written by `hami simulate --mix-out`: each class's share of the pods "
              "(docs/fgd.md)\n")
    Path(path).write_text(header + yaml.safe_dump({"scheduler": {"fgd": {"workload": classes}}}, sort_keys=False),
                          encoding="utf-8")
