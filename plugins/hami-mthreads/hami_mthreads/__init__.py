"""hami-mthreads: the Moore Threads backend for hami-core."""

from hami_mthreads.version import __version__

__all__ = ["__version__"]
