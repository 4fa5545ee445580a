"""Load Kubernetes Node, ResourceQuota and Pod objects from YAML (multi-document files and ``kind: List``)."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

from hami_core.engine.objectfile import objects_from_yaml
from hami_core.plugins.errors import HamiError
from hami_core.plugins.yamlload import MAX_INPUT_BYTES, YamlInputError, read_text

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
    ``strict`` it is skipped with a warning instead, unless nothing usable is left. The YAML is read with
    :mod:`hami_core.plugins.yamlload` (duplicate keys, alias bombs and deep nesting are errors).
    """
    kinds = (kind,) if isinstance(kind, str) else kind
    try:
        return objects_from_yaml(text, source=source, kinds=kinds, strict=strict, skipped=skipped, logger=log)
    except YamlInputError as exc:
        raise InputError(str(exc)) from None


def load_file(path: str | None, *, default: str, kind: str | tuple[str, ...], strict: bool = True,
              skipped: list[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Objects from ``path``, or from the bundled ``default`` file when ``path`` is None."""
    if path is None:
        return load_objects(bundled(default), source=f"<bundled {default}>", kind=kind), f"bundled {default}"
    p = Path(path)
    what = kind if isinstance(kind, str) else kind[0]
    try:
        text = read_text(p, f"{what} file", max_bytes=MAX_INPUT_BYTES)
    except YamlInputError as exc:
        raise InputError(str(exc)) from None
    return load_objects(text, source=str(p), kind=kind, strict=strict, skipped=skipped), str(p)
