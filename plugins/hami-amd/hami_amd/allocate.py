"""``Allocate`` for one AMD container: what HAMi's AMD design hands the container (``docs/develop/amd-vgpu.md`` §4.2,
§5, v2.10.0), with the CU bookkeeping and file layout of the AMD device plugin (Project-HAMi/amd-device-plugin).

* ``ROCR_VISIBLE_DEVICES``: the container-local GPU indexes ``0..n-1`` in allocation order (§7: ROCr accepted the
  container-local index; the AMD SMI UUID of the annotation does not identify a GPU to ROCr);
* ``HSA_CU_MASK``: ``<index>:<CU_list>`` per GPU, joined by ``;`` (``0:0-75;1:0-75``); each GPU's ``CU_list`` is as
  many CUs as the scheduler booked (``cuCount``, the annotation's cores field), chosen first-fit among the CUs that
  no live pod on the node holds on that GPU, so masks of pods sharing a GPU never overlap (§2, §5.2);
* ``HIP_DEVICE_MEMORY_LIMIT=<MiB>m``: the first GPU's memory, one limit for all GPUs of the container (§5.1);
* ``LD_AUDIT``: ``libamvgpu.so``, HAMi's AMD audit library (§3), bind-mounted read-only from the host's
  ``$HOST_HOOK_PATH/vgpu/libamvgpu.so``.

Who holds which CUs: the design leaves it to the device plugin. Like the AMD device plugin, each pod records its CUs
in ``hami.io/amd-cu-allocated`` (JSON ``{"<device id>": "<CU_list>"}``, every container of the pod merged), written
with the Allocate patch; a later Allocate reads it from every pod on the node that has not finished (Succeeded,
Failed: their CUs are free again, as their scheduler bookings are) and from this pod (its earlier containers).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from hami_amd.cumask import first_fit, format_cu_list, parse_cu_list
from hami_core.plugins import (
    ContainerAllocation,
    ContainerDevice,
    Mount,
    WireFormatError,
    annotations,
    current,
    pod_key,
    pod_ref,
)

log = logging.getLogger("hami.amd")

#: The AMD device plugin's record of the CUs a pod holds (its ``utils.CuAllocation``).
CU_ALLOCATED_ANNOTATION = "hami.io/amd-cu-allocated"
#: Where ``libamvgpu.so`` is seen in the container, and where the host keeps it under ``$HOST_HOOK_PATH``.
AUDIT_LIBRARY = "/usr/local/vgpu/libamvgpu.so"
HOST_HOOK_PATH_ENV = "HOST_HOOK_PATH"
DEFAULT_HOST_HOOK_PATH = "/usr/local"
#: Pods in these phases run no container any more: their CUs are free (as their scheduler bookings are).
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

CuHoldings = dict[str, frozenset[int]]


def read_holdings(pod: Mapping[str, Any]) -> CuHoldings:
    """The CUs ``pod`` holds per device id, from ``hami.io/amd-cu-allocated`` (absent or blank: none).

    Raises :class:`WireFormatError` naming the pod and the annotation when the value is not a JSON object of
    ID-list strings.
    """
    raw = annotations(pod).get(CU_ALLOCATED_ANNOTATION, "")
    if not raw.strip():
        return {}
    where = f"pod {pod_ref(pod)}: {CU_ALLOCATED_ANNOTATION}"
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise WireFormatError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise WireFormatError(f"{where}: expected an object of CU ID lists, got {raw!r}")
    try:
        return {uuid: parse_cu_list(text) for uuid, text in data.items()}
    except ValueError as exc:
        raise WireFormatError(f"{where}: {exc}") from None


def encode_holdings(holdings: Mapping[str, frozenset[int]]) -> str:
    """``hami.io/amd-cu-allocated`` for ``holdings`` (device ids sorted, compact ID lists)."""
    return json.dumps({uuid: format_cu_list(ids) for uuid, ids in sorted(holdings.items())}, separators=(",", ":"))


def node_holdings(pod: Mapping[str, Any]) -> CuHoldings:
    """The CUs every other unfinished pod on this node holds, per device id: empty outside a device plugin (no
    :func:`~hami_core.plugins.current` context). Another pod's unreadable record is skipped with a warning, as the
    AMD device plugin's pod informer skips it: one broken annotation must not stop every Allocate on the node."""
    ctx = current()
    if ctx is None:
        return {}
    held: dict[str, set[int]] = {}
    for other in ctx.list_pods():
        if pod_key(other) == pod_key(pod) or (other.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        try:
            holdings = read_holdings(other)
        except WireFormatError as exc:
            log.warning("ignoring the CUs of another pod: %s", exc)
            continue
        for uuid, ids in holdings.items():
            held.setdefault(uuid, set()).update(ids)
    return {uuid: frozenset(ids) for uuid, ids in held.items()}


def allocate(pod: Mapping[str, Any], devices: Sequence[ContainerDevice]) -> ContainerAllocation:
    """The container's env, the ``libamvgpu.so`` mount and the pod's updated ``hami.io/amd-cu-allocated``; nothing
    for a container without AMD devices."""
    if not devices:
        return ContainerAllocation()
    others = node_holdings(pod)
    merged = read_holdings(pod)
    masks = []
    for index, dev in enumerate(devices):
        mine = merged.get(dev.uuid, frozenset())
        cus = first_fit(others.get(dev.uuid, frozenset()) | mine, dev.usedcores,
                        where=f"pod {pod_ref(pod)}: device {dev.uuid}")
        merged[dev.uuid] = mine | cus
        masks.append(f"{index}:{format_cu_list(cus)}")
    hook = (os.environ.get(HOST_HOOK_PATH_ENV) or DEFAULT_HOST_HOOK_PATH).rstrip("/")
    env = {"ROCR_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices))),
           "HSA_CU_MASK": ";".join(masks),
           "HIP_DEVICE_MEMORY_LIMIT": f"{devices[0].usedmem}m",
           "LD_AUDIT": AUDIT_LIBRARY}
    return ContainerAllocation(env=env, mounts=(Mount(AUDIT_LIBRARY, f"{hook}/vgpu/libamvgpu.so", read_only=True),),
                               pod_annotations={CU_ALLOCATED_ANNOTATION: encode_holdings(merged)})
