"""A tiny valid vendor plugin: one backend and a node parser."""

from hami_core import hookimpl
from hami_core.plugins.types import DeviceBackend, ResourceNames

BACKEND = "TESTGPU"


@hookimpl
def hami_device_backends(config):
    return [DeviceBackend(name=BACKEND, vendor="testgpu", resource_names=ResourceNames("example.com/testgpu"))]


@hookimpl
def hami_node_devices(backend, node):
    if backend.name != BACKEND:
        return None
    return []
