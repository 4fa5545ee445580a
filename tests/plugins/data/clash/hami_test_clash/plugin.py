"""Registers the backend name ``TESTGPU`` that hami_test_plugins.success already registers."""

from hami_core import hookimpl
from hami_core.plugins.types import DeviceBackend, ResourceNames


@hookimpl
def hami_device_backends():
    return [DeviceBackend(name="TESTGPU", vendor="clash", resource_names=ResourceNames("example.com/clash"))]
