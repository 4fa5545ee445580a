"""Kubernetes objects from YAML files (multi-document, or ``kind: List``): the simulator's cluster and workload
files and ``--cluster-file``. The API server never hands out an object whose ``metadata`` is a number or whose
annotations are a list; a hand-written file can hold anything, so each object is checked here for the shape the
engine relies on, and a bad one is an error naming the file, the document (and item) and the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hami_core.engine.pods import pod_shape_error
from hami_core.plugins.yamlload import YamlInputError, load_yaml_all

__all__ = ["object_problem", "objects_from_yaml"]

log = logging.getLogger("hami.objects")

#: The API server's limit on metadata.name of most kinds (a DNS subdomain).
MAX_NAME = 253


def _string_map(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{where} must be an object, got {type(value).__name__}"
    for k, v in value.items():
        if not isinstance(k, str):
            return f"{where} keys must be strings, got {k!r}"
        if not isinstance(v, str):
            # YAML reads `true`, `5` or `2024-01-01` unquoted as other types; the API server refuses them.
            return f"{where}.{k} must be a string, got {type(v).__name__} (quote it)"
    return None


def _metadata_problem(obj: Mapping[str, Any], kind: str) -> str | None:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return f"{kind} has no metadata" if meta is None else \
            f"{kind}: metadata must be an object, got {type(meta).__name__}"
    name = meta.get("name")
    if not name:
        return f"{kind} has no metadata.name"
    if not isinstance(name, str) or len(name) > MAX_NAME:
        return f"{kind}: metadata.name must be a string of at most {MAX_NAME} characters, got {name!r:.80}"
    for field in ("namespace", "uid", "resourceVersion"):
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            return f"{kind} {name}: metadata.{field} must be a string, got {type(value).__name__}"
    for field in ("labels", "annotations"):
        problem = _string_map(meta.get(field), f"metadata.{field}")
        if problem is not None:
            return f"{kind} {name}: {problem}"
    return None


def object_problem(obj: Any, kinds: tuple[str, ...], *, require_kind: bool = False) -> str | None:
    """Why ``obj`` is not a usable object of one of ``kinds``, or None. An object without ``kind`` is of the
    first kind, unless ``require_kind``."""
    wanted = " or ".join(kinds)
    if not isinstance(obj, Mapping):
        return f"expected a {wanted} object, got {type(obj).__name__}"
    if require_kind and "kind" not in obj:
        return f"object has no kind (expected {wanted})"
    kind = obj.get("kind", kinds[0])
    if kind not in kinds:
        return f"expected kind {wanted}, got {kind!r:.80}"
    problem = _metadata_problem(obj, kind)
    if problem is not None:
        return problem
    meta = obj["metadata"]
    label = f"{kind} {meta['namespace']}/{meta['name']}" if meta.get("namespace") else f"{kind} {meta['name']}"
    for field in ("spec", "status"):
        value = obj.get(field)
        if value is not None and not isinstance(value, Mapping):
            return f"{label}: {field} must be an object, got {type(value).__name__}"
    if kind == "Pod":
        shape = pod_shape_error(obj)
        if shape is not None:
            return f"Pod {meta.get('namespace') or 'default'}/{meta['name']}: {shape}"
    elif kind == "Node":
        status = obj.get("status") or {}
        for field in ("capacity", "allocatable"):
            value = status.get(field)
            if value is not None and not isinstance(value, Mapping):
                return f"{label}: status.{field} must be an object, got {type(value).__name__}"
    elif kind == "ResourceQuota":
        hard = (obj.get("spec") or {}).get("hard")
        if not isinstance(hard, Mapping):
            return f"ResourceQuota {meta.get('namespace') or 'default'}/{meta['name']}: spec.hard must be an object"
    return None


def objects_from_yaml(text: str, *, source: str, kinds: tuple[str, ...], strict: bool = True,
                      other_kinds: bool = False, skipped: list[str] | None = None,
                      logger: logging.Logger = log) -> list[dict[str, Any]]:
    """Every object of ``kinds`` in ``text``, read with :func:`~hami_core.plugins.yamlload.load_yaml_all`.

    A problem is a :class:`~hami_core.plugins.yamlload.YamlInputError` whose message names ``source``, the
    document (and item) and the field; without ``strict`` it is skipped with a warning (on ``logger``) instead,
    unless nothing usable is left. With ``other_kinds``
    an object of another kind (a Deployment in a cluster file) is ignored rather than a problem, and every
    object must say its kind; a document that is not an object at all is always a problem.
    """
    docs = load_yaml_all(text, source)
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                problems.append(f"{source}: document {i + 1}: items must be a list, got {type(items).__name__}")
                if strict:
                    raise YamlInputError(problems[-1])
                logger.warning("skipped: %s", problems[-1])
                continue
        else:
            items = [doc]
        for j, obj in enumerate(items):
            where = f"{source}: document {i + 1}" + (f" item {j + 1}" if len(items) > 1 else "")
            if other_kinds and isinstance(obj, Mapping) and obj.get("kind") not in (*kinds, None):
                continue
            problem = object_problem(obj, kinds, require_kind=other_kinds)
            if problem is None:
                out.append(dict(obj))
                continue
            message = f"{where}: {problem}"
            if strict:
                raise YamlInputError(message)
            problems.append(message)
            logger.warning("skipped: %s", message)
    if problems and not out:
        raise YamlInputError(problems[0] + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""))
    if skipped is not None:
        skipped.extend(problems)
    return out
