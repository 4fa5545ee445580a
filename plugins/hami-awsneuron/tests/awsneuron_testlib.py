"""Builders for the hami-awsneuron tests: the Neuron defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi's Neuron backend: no device memory, ``count`` = NeuronCores per device (one task per core) and
cores as a two-bit mask (3 = both cores of a device). The vendor-neutral pieces (``Clock``, ``chosen``,
``gpu_policy``...) come from the kit; this module adds Neuron's resource names, annotation keys and nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import hami_awsneuron.plugin
from hami_awsneuron.backend import COMMON_WORD, NeuronBackend
from hami_awsneuron.config import AWSNeuronConfig
from hami_awsneuron.topology import NODE_TYPE_KEY
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult, GpuPolicy
from hami_core.testing import Clock as Clock
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy

NEURON = "aws.amazon.com/neuron"
NEURONCORE = "aws.amazon.com/neuroncore"
ALLOCATED = "hami.io/aws-neuron-devices-allocated"
USE_UUID = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID = "aws.amazon.com/nouse-neuron-uuid"
AWS_NEURON_IDS = "AWS_NEURON_IDS"
PREDICATE_NODE = "aws.amazon.com/predicate-node"
ALLOC_TIME = "NEURON_ALLOC_TIME"
RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
NEURON_ALLOCATED = "NEURON_ALLOCATED"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


# --------------------------------------------------------------------------------------------- engine
AWSNEURON = kit.VendorKit(hami_awsneuron.plugin, "awsneuron", AWSNeuronConfig)
#: A plugin manager with the built-ins and hami-awsneuron; an engine on an ``awsneuron:`` section (the defaults when
#: ``None``) at a fake time; the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = AWSNEURON.plugin_manager, AWSNEURON.engine, AWSNEURON.parse_config


def make_backend(cores_per_device: int = 0, **section: Any) -> NeuronBackend:
    """The backend for an ``awsneuron:`` section given as keyword arguments (HAMi's camelCase keys), with HAMi's
    ``coresPerAWSNeuron`` set as the Go tests set it (0: no node registered yet)."""
    backend = NeuronBackend.from_config(parse_config(section))
    backend.layout.cores_per_device = cores_per_device
    return backend


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>`` unless given.
container, make_pod = AWSNEURON.container, AWSNEURON.pod


# --------------------------------------------------------------------------------------------- nodes
def neuron_node(name: str = "neuron-node", devices: int | str | None = 2, cores: int | str | None = 4, *,
                instance_type: str | None = "trn1.32xlarge") -> dict[str, Any]:
    """A node as the AWS Neuron device plugin announces it: ``status.capacity`` (and allocatable) of
    ``aws.amazon.com/neuron`` = ``devices`` and ``aws.amazon.com/neuroncore`` = ``cores`` (left out when ``None``),
    and the EC2 instance-type label."""
    capacity = {k: v for k, v in ((NEURON, devices), (NEURONCORE, cores)) if v is not None}
    labels = {INSTANCE_TYPE: instance_type} if instance_type is not None else None
    return kit.node(name, labels=labels, allocatable=capacity)


# --------------------------------------------------------------------------------------------- fit
def usage(id: str, index: int = 0, *, used: int = 0, count: int = 2, totalcore: int = 3, usedcores: int = 0,
          node_type: str | None = "trn", health: bool = True) -> DeviceUsage:
    """HAMi's ``makeAWSDeviceUsage``: a Neuron device (no memory) with ``AWSNodeType`` = ``node_type``
    (no custom info when ``None``)."""
    info = None if node_type is None else {NODE_TYPE_KEY: node_type}
    return kit.usage(id, vendor=COMMON_WORD, index=index, count=count, totalmem=0, totalcore=totalcore, used=used,
                     usedcores=usedcores, health=health, custom_info=info)


def request(nums: int = 1, coresreq: int = 2, type: str = COMMON_WORD) -> DeviceRequest:
    """A Neuron request as HAMi builds it: no memory, percentage 0."""
    return kit.request(type, nums, 0, coresreq, 0)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: NeuronBackend | None = None) -> FitResult:
    """:meth:`NeuronBackend.hami_filter_nodes` on one node whose devices are given in HAMi's sorted order (the
    preferred device last)."""
    neuron = backend or make_backend()
    return kit.fit_one(neuron.hami_filter_nodes, neuron, devices, req, pod_annotations=pod_annotations,
                       policy=policy)
