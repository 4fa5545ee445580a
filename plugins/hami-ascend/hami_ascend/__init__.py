"""hami-ascend: the Huawei Ascend NPU backends for hami-core."""

from hami_ascend.version import __version__

__all__ = ["__version__"]
