"""hami-vastai: the Vastai backend for hami-core."""

from hami_vastai.version import __version__

__all__ = ["__version__"]
