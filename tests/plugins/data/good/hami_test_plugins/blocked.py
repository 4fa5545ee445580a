"""A valid plugin the tests block by entry point name: it must never be imported then."""

from hami_core import hookimpl


@hookimpl
def hami_pod_bound(pod, node):
    return None
