"""hami-biren: the Biren GPU backend for hami-core."""

from hami_biren.version import __version__

__all__ = ["__version__"]
