"""hami-awsneuron: the AWS Neuron (Inferentia, Trainium) backend for hami-core."""

from hami_awsneuron.version import __version__

__all__ = ["__version__"]
