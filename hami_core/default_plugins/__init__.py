"""Built-in plugins: HAMi's generic behaviour, registered before any vendor and held to the same contract.

Vendors override them by answering first (they are ``trylast``) or, for merged hooks, by adding keys. The built-in
policy packages (:data:`hami_core.policies.PACKAGES`) come last.
"""

from hami_core.policies import PACKAGES

DEFAULT_PLUGINS: tuple[str, ...] = (
    "hami_core.default_plugins.health",
    "hami_core.default_plugins.codec",
    "hami_core.default_plugins.lock",
    "hami_core.default_plugins.score",
    "hami_core.default_plugins.policies",
    *PACKAGES,
)
