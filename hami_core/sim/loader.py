"""Load Kubernetes Node and Pod objects from YAML (multi-document files and ``kind: List``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hami_core.plugins.errors import HamiError


class InputError(HamiError):
    """A simulator input file is missing or malformed."""


def bundled(name: str) -> str:
    """Text of a bundled example file (``cluster.yaml`` or ``workload.yaml``)."""
    return resources.files("hami_core.sim").joinpath("data", name).read_text(encoding="utf-8")


def load_objects(text: str, *, source: str, kind: str) -> list[dict[str, Any]]:
    """Every object of ``kind`` in ``text``; anything else is an error naming the document."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from None
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for j, obj in enumerate(items or []):
            where = f"{source}: document {i + 1}" + (f" item {j + 1}" if len(items) > 1 else "")
            if not isinstance(obj, dict):
                raise InputError(f"{where}: expected a {kind} object, got {type(obj).__name__}")
            if obj.get("kind", kind) != kind:
                raise InputError(f"{where}: expected kind {kind}, got {obj.get('kind')!r}")
            if not (obj.get("metadata") or {}).get("name"):
                raise InputError(f"{where}: {kind} has no metadata.name")
            out.append(obj)
    return out


def load_file(path: str | None, *, default: str, kind: str) -> tuple[list[dict[str, Any]], str]:
    """Objects from ``path``, or from the bundled ``default`` file when ``path`` is None."""
    if path is None:
        return load_objects(bundled(default), source=f"<bundled {default}>", kind=kind), f"bundled {default}"
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {kind} file {p}: {exc.strerror or exc}") from None
    return load_objects(text, source=str(p), kind=kind), str(p)
