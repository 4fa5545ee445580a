"""hami-kunlun: the Kunlunxin whole-card XPU (``kunlun``) and vXPU (``XPU``) backends for hami-core."""

from hami_kunlun.version import __version__

__all__ = ["__version__"]
