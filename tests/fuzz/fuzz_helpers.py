"""Shared hypothesis strategies for the fuzz tests: HAMi-shaped garbage and the engine with every vendor enabled."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from hami_core.engine.facade import Engine

ROOT = Path(__file__).resolve().parents[2]
#: Every vendor section HAMi ships (deploy/device-config.yaml, the chart's render, has each with its defaults).
ALL_VENDORS_CONFIG = ROOT / "deploy" / "device-config.yaml"

# Fragments that HAMi's encodings are made of, so that random strings often get past the first check.
_TOKENS = [",", ":", ";", "-", "_", "[", "]", "{", "}", '"', "=", " ", "\n", "GPU-0", "GPU-1", "NVIDIA", "MLU",
           "DCU", "XPU", "Ascend910B3", "BI-V100", "Metax-SGPU", "MTT S4000", "Enflame", "0", "1", "-1", "100",
           "1024", "99999999999999999999", "1e3", "0x10", "1.5", "true", "false", "null", "hami-core", "mig",
           "1g.10gb", "Gi", "Mi", "m", "k", "NaN", "Infinity", "\u00e9", "\x00", "\ud7ff"]

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=12)
    | st.sampled_from(_TOKENS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health", "uuid",
                         "usedmem", "usedcores", "idx", "customInfo", "migProfiles", "aicore", "aicpu", "memory",
                         "name", "vdie", "die", "score", "devices", "items"]) | st.text(max_size=6),
        inner, max_size=6),
    max_leaves=16,
)


def _safe_json(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (ValueError, TypeError):
        return "null"


#: Strings for an annotation or a label value: plain text, HAMi-shaped token soup, JSON of anything.
annotation_values = (st.text(max_size=40)
                     | st.lists(st.sampled_from(_TOKENS), max_size=30).map("".join)
                     | _json_values.map(_safe_json))

_QUANTITY = re.compile(r"[+-]?[0-9]{0,25}(\.[0-9]{0,6})?([eE][+-]?[0-9]{1,3}|[KMGTPE]i?|[mkun])?")
#: Strings for a resource quantity.
quantity_values = (st.sampled_from(["1", "0", "-1", "2.5", "1Gi", "1e3", "1E", "100m", "0x10", "", " 1", "1_0",
                                    "9" * 40, "1Ki", "1.5Mi", "+3", "NaN", "1e400", "1Pi", "3m"])
                   | st.from_regex(_QUANTITY, fullmatch=True)
                   | st.text(max_size=12))


@cache
def all_vendor_engine_config() -> Any:
    from hami_core.engine.config import load_config

    return load_config(ALL_VENDORS_CONFIG)


def all_vendor_engine(clock: Any = None) -> Engine:
    """An engine with the installed vendor plugins, every HAMi vendor section enabled."""
    return Engine(all_vendor_engine_config(), clock=clock or (lambda: 1_700_000_000.0))


@cache
def annotation_keys() -> tuple[str, ...]:
    """Every annotation key the backends declare plus every ``vendor/key`` literal in the plugins' code."""
    found: set[str] = set()
    engine = all_vendor_engine()
    for backend in engine.backends.values():
        for field in ("register_annotation", "handshake_annotation", "to_allocate_annotation",
                      "allocated_annotation", "use_type_annotation", "nouse_type_annotation",
                      "use_uuid_annotation", "nouse_uuid_annotation", "lock_annotation"):
            value = getattr(backend, field)
            if value:
                found.add(value)
    literal = re.compile(r'"([a-z0-9.-]+\.(?:io|com|cn|ai)/[A-Za-z0-9._-]+)"')
    for path in [*ROOT.glob("plugins/hami-*/hami_*/*.py"), ROOT / "hami_core" / "wire" / "keys.py"]:
        found.update(literal.findall(path.read_text(encoding="utf-8")))
    return tuple(sorted(found))


@cache
def resource_names() -> tuple[str, ...]:
    """Every extended resource name of every backend (count, memory, cores, ...)."""
    names: set[str] = set()
    for backend in all_vendor_engine().backends.values():
        rn = backend.resource_names
        for field in ("count", "memory", "memory_percentage", "cores", "priority"):
            value = getattr(rn, field, None)
            if isinstance(value, str) and value:
                names.add(value)
    return tuple(sorted(names))


json_values = _json_values


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``strategy`` most of the time, else any JSON value in its place (a wrong type)."""
    return st.one_of(strategy, strategy, strategy, _json_values)


def _containers() -> st.SearchStrategy[Any]:
    resources = st.fixed_dictionaries({}, optional={
        "limits": _maybe(st.dictionaries(st.sampled_from(resource_names()) | st.text(max_size=8),
                                         _maybe(quantity_values), max_size=4)),
        "requests": _maybe(st.dictionaries(st.sampled_from(resource_names()), _maybe(quantity_values), max_size=2))})
    env = st.lists(_maybe(st.fixed_dictionaries({"name": _maybe(st.sampled_from(
        ["CUDA_DISABLE_CONTROL", "NVIDIA_VISIBLE_DEVICES", "X"])), "value": _maybe(annotation_values)})), max_size=2)
    container = st.fixed_dictionaries({}, optional={"name": _maybe(st.text(max_size=6)), "image": st.just("i"),
                                                    "resources": _maybe(resources), "env": _maybe(env)})
    return st.lists(_maybe(container), max_size=3)


def pods() -> st.SearchStrategy[Any]:
    """Pod-shaped JSON: the right keys with random (sometimes wrongly typed) values."""
    meta = st.fixed_dictionaries({}, optional={
        "name": _maybe(st.text(max_size=10)), "namespace": _maybe(st.text(max_size=6)),
        "uid": _maybe(st.text(max_size=6)),
        "annotations": _maybe(st.dictionaries(st.sampled_from(annotation_keys()), annotation_values, max_size=4)),
        "labels": _maybe(st.dictionaries(st.sampled_from(["hami.io/webhook", "hami.io/vgpu-node", "app"]),
                                         annotation_values, max_size=2))})
    spec = st.fixed_dictionaries({}, optional={
        "containers": _maybe(_containers()), "initContainers": _maybe(_containers()),
        "schedulerName": _maybe(st.sampled_from(["hami-scheduler", "default-scheduler", ""])),
        "nodeName": _maybe(st.text(max_size=6)), "priorityClassName": _maybe(st.text(max_size=6))})
    status = st.fixed_dictionaries({}, optional={"phase": _maybe(st.sampled_from(["Pending", "Running", "Failed"]))})
    return st.fixed_dictionaries({}, optional={"apiVersion": st.just("v1"), "kind": st.just("Pod"),
                                               "metadata": _maybe(meta), "spec": _maybe(spec),
                                               "status": _maybe(status)})
