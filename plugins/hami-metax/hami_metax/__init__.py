"""hami-metax: the MetaX GPU (whole card) and sGPU (shared) backends for hami-core."""

from hami_metax.version import __version__

__all__ = ["__version__"]
