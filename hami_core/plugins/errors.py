"""The project's exception hierarchy, split by who must act and what happens next.

Expected scheduling outcomes (a node that does not fit) are values (:class:`FitResult`), never
exceptions. Exceptions are for contract breaches (the plugin author acts), bad configuration or
input (the operator or user acts) and transient cluster trouble (retry).
"""

from __future__ import annotations


class HamiError(Exception):
    """Base of every error raised by hami-core."""


class PluginError(HamiError):
    """A plugin broke the contract: bad hook signature, unknown hook, duplicate vendor key.

    The message always names the plugin (entry point and distribution where known).
    """


class ConfigError(HamiError):
    """Configuration (device-config.yaml shape) is invalid. The message names the field."""


class WireFormatError(HamiError, ValueError):
    """An annotation or quantity could not be decoded. The message names the key and the value."""


class AdmissionDenied(HamiError):
    """The admission webhook refuses the pod (HTTP-level allowed=false, code 403)."""

    def __init__(self, message: str, code: int = 403) -> None:
        super().__init__(message)
        self.code = code


class AdmissionFailed(HamiError):
    """A backend could not process the pod at admission (HAMi returns an errored review, code 500)."""

    def __init__(self, message: str, code: int = 500) -> None:
        super().__init__(message)
        self.code = code


class TemporaryError(HamiError):
    """Retry later (node lock contention, API conflict). ``delay`` is the suggested wait in seconds."""

    def __init__(self, message: str, delay: float = 0.1) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(HamiError):
    """Retrying cannot help (the pod or node is gone, the request is malformed)."""
