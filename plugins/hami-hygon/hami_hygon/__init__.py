"""hami-hygon: the Hygon DCU backend for hami-core."""

from hami_hygon.version import __version__

__all__ = ["__version__"]
