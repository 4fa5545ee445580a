"""Load Kubernetes Node, ResourceQuota and Pod objects from YAML (multi-document files and ``kind: List``)."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hami_core.engine.pods import pod_shape_error
from hami_core.plugins.errors import HamiError

log = logging.getLogger("hami.sim")


class InputError(HamiError):
    """A simulator input file is missing or malformed."""


def bundled(name: str) -> str:
    """Text of a bundled example file (``cluster.yaml`` or ``workload.yaml``)."""
    return resources.files("hami_core.sim").joinpath("data", name).read_text(encoding="utf-8")


def load_objects(text: str, *, source: str, kind: str | tuple[str, ...], strict: bool = True,
                 skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Every object of ``kind`` (or of any of several kinds; an object without ``kind`` is the first) in ``text``.

    A malformed object is an error naming the file, the document (and item) and the field; without
    ``strict`` it is skipped with a warning instead, unless nothing usable is left.
    """
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from None
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for j, obj in enumerate(items or []):
            where = f"{source}: document {i + 1}" + (f" item {j + 1}" if len(items) > 1 else "")
            problem = _check(obj, kind)
            if problem is None:
                out.append(obj)
                continue
            message = f"{where}: {problem}"
            if strict:
                raise InputError(message)
            problems.append(message)
            log.warning("skipped: %s", message)
    if problems and not out:
        raise InputError(problems[0] + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""))
    if skipped is not None:
        skipped.extend(problems)
    return out


def _check(obj: Any, kinds: str | tuple[str, ...]) -> str | None:
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    wanted = " or ".join(kinds)
    if not isinstance(obj, dict):
        return f"expected a {wanted} object, got {type(obj).__name__}"
    kind = obj.get("kind", kinds[0])
    if kind not in kinds:
        return f"expected kind {wanted}, got {obj.get('kind')!r}"
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        return f"{kind} has no metadata.name"
    if kind == "Pod":
        shape = pod_shape_error(obj)
        if shape is not None:
            return f"Pod {meta.get('namespace') or 'default'}/{meta['name']}: {shape}"
    if kind == "ResourceQuota":
        spec = obj.get("spec")
        hard = spec.get("hard") if isinstance(spec, dict) else None
        if not isinstance(hard, dict):
            return f"ResourceQuota {meta.get('namespace') or 'default'}/{meta['name']}: spec.hard must be an object"
    return None


def load_file(path: str | None, *, default: str, kind: str | tuple[str, ...], strict: bool = True,
              skipped: list[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Objects from ``path``, or from the bundled ``default`` file when ``path`` is None."""
    if path is None:
        return load_objects(bundled(default), source=f"<bundled {default}>", kind=kind), f"bundled {default}"
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        what = kind if isinstance(kind, str) else kind[0]
        raise InputError(f"cannot read {what} file {p}: {exc.strerror or exc}") from None
    return load_objects(text, source=str(p), kind=kind, strict=strict, skipped=skipped), str(p)
