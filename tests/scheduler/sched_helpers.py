"""Builders for the scheduler tests: NVIDIA nodes and pods, a running service on 127.0.0.1, HTTP calls."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import hami_nvidia.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.wire import keys

GIB = 1024


def nvidia_node(name: str, gpus: int = 2, mem: int = 24576, uuid_prefix: str | None = None) -> dict[str, Any]:
    prefix = uuid_prefix or f"GPU-{name}"
    devices = [{"id": f"{prefix}-{i}", "index": i, "count": 10, "devmem": mem, "devcore": 100,
                "type": "NVIDIA A10", "mode": "hami-core", "health": True} for i in range(gpus)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {keys.NODE_NVIDIA_REGISTER: json.dumps(devices)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus * 10)},
                       "capacity": {"nvidia.com/gpu": str(gpus * 10)}}}


def gpu_pod(name: str, *, gpus: int = 1, mem: int | None = None, cores: int | None = None,
            namespace: str = "default", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


def make_engine(clock: Any = None) -> Engine:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_nvidia.plugin])
    kwargs = {"clock": clock} if clock is not None else {}
    return Engine({"nvidia": {}}, plugins=pm, **kwargs)


def post(url: str, body: Any, *, raw: bytes | None = None, context: ssl.SSLContext | None = None,
         ) -> tuple[int, str, Any]:
    """POST JSON (or ``raw`` bytes); returns (status, content type, decoded JSON or text)."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            status, ctype, payload = resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        status, ctype, payload = exc.code, exc.headers.get("Content-Type", ""), exc.read()
    text = payload.decode()
    return status, ctype, json.loads(text) if ctype.startswith("application/json") else text


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """A minimal RFC 6902 applier (add/replace/remove) for checking the webhook's patches."""
    import copy

    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        if not parts:
            doc = op.get("value")
            continue
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if isinstance(parent, list):
            idx = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(idx, op["value"])
            elif op["op"] == "replace":
                parent[idx] = op["value"]
            else:
                del parent[idx]
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace":
                assert last in parent, op
            parent[last] = op["value"]
        else:
            del parent[last]
    return doc
