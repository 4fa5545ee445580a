"""hami-amd: the AMD Instinct GPU backend for hami-core."""

from hami_amd.version import __version__

__all__ = ["__version__"]
