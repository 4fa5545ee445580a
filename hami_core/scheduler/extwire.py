"""The extender's wire shapes (``k8s.io/kube-scheduler/extender/v1``) and the Event reasons it posts.

Requests carry capitalised keys (read here case-insensitively, as Go decodes JSON); results always carry every
key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins.errors import HamiError

__all__ = ["BINDING_FAILED", "BINDING_SUCCEED", "FILTERING_FAILED", "FILTERING_SUCCEED", "NORMAL", "WARNING",
           "BadRequest", "NodeNames", "filter_result", "lower_keys"]

NORMAL, WARNING = "Normal", "Warning"
FILTERING_FAILED, FILTERING_SUCCEED = "FilteringFailed", "FilteringSucceed"
BINDING_FAILED, BINDING_SUCCEED = "BindingFailed", "BindingSucceed"


class BadRequest(HamiError):
    """The request body is structurally wrong (the server answers HTTP 400 with this message)."""


def lower_keys(args: Any, what: str) -> dict[str, Any]:
    """``args`` with its top-level keys lower-cased (Go decodes JSON keys case-insensitively)."""
    if not isinstance(args, Mapping):
        raise BadRequest(f"{what} must be a JSON object, got {type(args).__name__}")
    return {str(k).lower(): v for k, v in args.items()}


def filter_result(*, nodes: Any = None, node_names: list[str] | None = None,
                  failed: Mapping[str, str] | None = None, unresolvable: Mapping[str, str] | None = None,
                  error: str = "") -> dict[str, Any]:
    """An ``ExtenderFilterResult`` with every key present (``unresolvable``: nodes no preemption can fix)."""
    return {"Nodes": nodes, "NodeNames": node_names, "FailedNodes": dict(failed) if failed is not None else None,
            "FailedAndUnresolvableNodes": dict(unresolvable) if unresolvable else None, "Error": error}


class NodeNames:
    """``ExtenderArgs.NodeNames`` checked to be a list of strings.

    kube-scheduler names the same nodes in request after request, so the last list checked is kept: an equal list
    is answered with that one (one C-level comparison instead of a type check per name, and the engine's candidate
    cache then compares item by identity).
    """

    def __init__(self) -> None:
        self._seen: list[str] | None = None  # the last NodeNames list that passed the check

    def check(self, names: Any) -> list[str] | None:
        if names is None:
            return None
        seen = self._seen
        if seen is not None and names == seen:
            return seen
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        self._seen = list(names)  # a copy: the caller's list may change after this request
        return names
