"""The simulator's input errors, below every module that raises them (experiment, defrag) so none imports another
for its error."""

from __future__ import annotations

from hami_core.plugins.errors import HamiError


class PolicyError(HamiError):
    """A ``--policy`` item names no policy that the loaded plugins offer (or another experiment input is invalid)."""
