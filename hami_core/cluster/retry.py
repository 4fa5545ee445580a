"""One retry helper for writes and reads against the cluster: the extender's pod patches and Bindings, the node
lock's compare-and-swap writes, and the device plugin's API calls in Allocate.

Whether an error is worth retrying is the caller's rule (``final``), stated in terms of the error hierarchy
(:mod:`hami_core.plugins.errors`): :func:`permanent` (retry everything but a :class:`PermanentError`, such as 404)
and :func:`not_temporary` (retry only a :class:`TemporaryError` or an error from outside the hierarchy, such as a
broken connection). A caller may add its own final errors (node lock contention is temporary, yet waiting for it
is not the retry loop's job).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from hami_core.plugins.errors import HamiError, PermanentError, TemporaryError

__all__ = ["never", "not_temporary", "permanent", "retry"]

log = logging.getLogger("hami.cluster.retry")

T = TypeVar("T")


def never(exc: BaseException) -> bool:
    """Every error is worth another attempt."""
    return False


def permanent(exc: BaseException) -> bool:
    """Final: a :class:`PermanentError` (the object is gone, the request is malformed)."""
    return isinstance(exc, PermanentError)


def not_temporary(exc: BaseException) -> bool:
    """Final: any project error that is not a :class:`TemporaryError` (404, 403, 422, a bad request)."""
    return isinstance(exc, HamiError) and not isinstance(exc, TemporaryError)


def retry(what: str, step: Callable[[], T], *, attempts: int, backoff_s: float,
          sleep: Callable[[float], None] = time.sleep, final: Callable[[BaseException], bool] = permanent,
          jitter: float = 0.5, wrap: bool = True, level: int = logging.DEBUG, logger: logging.Logger = log) -> T:
    """``step()``, retried up to ``attempts`` times with exponential backoff (``backoff_s``, doubling, plus up to
    ``jitter`` times the delay at random) on any error for which ``final(error)`` is false; a final error is raised
    at once. The last error is raised as it is when it is a :class:`HamiError` (or with ``wrap=False``), else as a
    :class:`HamiError` naming ``what``. Each retried failure is logged at ``level`` to ``logger`` (the caller's)."""
    delay = backoff_s
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except Exception as exc:
            if final(exc):
                raise
            if attempt == attempts:
                if not wrap or isinstance(exc, HamiError):
                    raise
                raise HamiError(f"{what}: {exc}") from exc
            logger.log(level, "%s: attempt %d failed (%s); retrying", what, attempt, exc)
            sleep(delay * (1 + random.uniform(0, jitter)) if jitter else delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover

