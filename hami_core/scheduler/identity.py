"""Who may write scheduler-owned annotations: the identities of hami's own components, as kube-apiserver names
them in an AdmissionReview's ``request.userInfo``.

kube-apiserver fills ``userInfo`` from the authenticated caller (client certificate, ServiceAccount token, ...),
so a request body cannot claim another identity; the webhook needs only to compare names. The defaults are the
ServiceAccounts deploy/ runs the scheduler and the device plugin as (``kube-system``). ``system:nodes`` (every
kubelet) and cluster administrators are not trusted by default: a node can only write its own pods' status, and
an administrator who must repair an allocation by hand can add their name for the time it takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_SERVICE_ACCOUNTS", "TrustedIdentities", "default_users", "parse_names"]

#: The namespace deploy/ installs into.
DEFAULT_NAMESPACE = "kube-system"
#: The ServiceAccounts of the scheduler (filter and bind write the allocation) and the device plugin (Allocate
#: pops the to-allocate key and sets the bind phase): charts/hami-py/templates/{scheduler,device-plugin}/rbac.yaml.
DEFAULT_SERVICE_ACCOUNTS = ("hami-scheduler", "hami-device-plugin")


def default_users(namespace: str = DEFAULT_NAMESPACE) -> tuple[str, ...]:
    """``system:serviceaccount:<namespace>:<name>`` for each of :data:`DEFAULT_SERVICE_ACCOUNTS`."""
    return tuple(f"system:serviceaccount:{namespace}:{name}" for name in DEFAULT_SERVICE_ACCOUNTS)


def parse_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of user or group names (blanks around commas ignored, duplicates dropped); raises
    ``ValueError`` for an empty entry or one with blanks inside, which no API-server identity has."""
    names: list[str] = []
    for i, raw in enumerate(text.split(",")):
        name = raw.strip()
        if not name:
            raise ValueError(f"entry {i + 1} of {text!r} is empty")
        if any(c.isspace() for c in name):
            raise ValueError(f"{name!r} contains whitespace, which no Kubernetes user or group name has")
        if name not in names:
            names.append(name)
    return tuple(names)


@dataclass(frozen=True, slots=True)
class TrustedIdentities:
    """User names and group names allowed to change scheduler-owned annotations on an existing pod."""

    users: frozenset[str]
    groups: frozenset[str] = frozenset()

    @classmethod
    def of(cls, users: Iterable[str] | None = None, groups: Iterable[str] = ()) -> TrustedIdentities:
        """``users`` (default: :func:`default_users`) and ``groups``; at least one of them must name someone,
        else the scheduler's own writes would be refused."""
        chosen = frozenset(default_users() if users is None else users)
        group_set = frozenset(groups)
        if not chosen and not group_set:
            raise ValueError("trusted identities: name at least one user or group (the scheduler's ServiceAccount, "
                             f"e.g. {default_users()[0]}), or every allocation write would be refused")
        return cls(chosen, group_set)

    def trusts(self, user_info: Any) -> bool:
        """Whether ``user_info`` (an AdmissionReview's ``request.userInfo``) is one of these identities.

        Anything not shaped like a ``UserInfo`` (missing, not an object, a name that is not a string) is not
        trusted: an admission request always carries one, so its absence means the review is not from
        kube-apiserver.
        """
        if not isinstance(user_info, Mapping):
            return False
        name = user_info.get("username")
        if isinstance(name, str) and name in self.users:
            return True
        groups = user_info.get("groups")
        if self.groups and isinstance(groups, list):
            return any(isinstance(g, str) and g in self.groups for g in groups)
        return False

    def describe(self) -> str:
        """For log lines and denial messages: ``users a, b; groups c``."""
        parts = [f"users {', '.join(sorted(self.users))}"] if self.users else []
        if self.groups:
            parts.append(f"groups {', '.join(sorted(self.groups))}")
        return "; ".join(parts)
