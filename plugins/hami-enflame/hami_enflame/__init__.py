"""hami-enflame: the Enflame GCU (whole card) and Enflame DRS (hard partition) backends for hami-core."""

from hami_enflame.version import __version__

__all__ = ["__version__"]
