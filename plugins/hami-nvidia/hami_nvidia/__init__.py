"""hami-nvidia: the NVIDIA backend for hami-core."""

from hami_nvidia.version import __version__

__all__ = ["__version__"]
