"""A misspelled hook name: must not pass silently."""

from hami_core import hookimpl


@hookimpl
def hami_filtr_node(pod, node):
    return None
