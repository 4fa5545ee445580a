"""hami-iluvatar: the Iluvatar CoreX backends for hami-core (one per configured chip)."""

from hami_iluvatar.version import __version__

__all__ = ["__version__"]
