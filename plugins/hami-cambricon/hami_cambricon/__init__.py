"""hami-cambricon: the Cambricon MLU backend for hami-core."""

from hami_cambricon.version import __version__

__all__ = ["__version__"]
