"""The framing limits of one connection, shared by both httptools-based servers (:mod:`.aioserver`, :mod:`.asgi`).

llhttp parses strictly but bounds nothing: left alone, a 256 MiB header line or URL is buffered whole (httptools
joins a header's pieces in Python until the line ends). :class:`HeadGuard` counts what the current request's head
holds as the parser reports it and raises :class:`Refused` past a limit of :mod:`.routes` (414 for the URL, 431
for one header, the header count, or the whole head), so a connection never buffers more than the limit plus one
read (256 KiB). :func:`evict_idle` keeps a listener's open connections bounded without letting idle sockets lock
callers out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import httptools

from hami_core.scheduler.routes import MAX_HEAD, MAX_HEADER_LINE, MAX_HEADERS, MAX_URL, Reply, text

__all__ = ["HeadGuard", "Refused", "evict_idle", "parse_error", "refusal"]

log = logging.getLogger("hami.scheduler.server")

T = TypeVar("T")


class Refused(Exception):
    """A request refused while its head is parsed; ``reply`` is what the client gets before the connection closes."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class HeadGuard:
    """What the request head being parsed holds so far. Call :meth:`begin` at each message, :meth:`url` and
    :meth:`header` from the parser's callbacks, :meth:`complete` once the headers are in, and :meth:`fed` after
    every ``feed_data`` (it counts the bytes of a head that spans reads, whose last header the callbacks see only
    at its end: a header line of 64 MiB is refused after its first 64 KiB, not buffered whole)."""

    __slots__ = ("head_bytes", "headers", "in_head", "parsed", "url_bytes")

    def __init__(self) -> None:
        self.in_head = False
        self.head_bytes = self.headers = self.url_bytes = self.parsed = 0

    def begin(self) -> None:
        self.in_head = True
        self.head_bytes = self.headers = self.url_bytes = self.parsed = 0

    def url(self, piece: bytes) -> None:
        self.url_bytes += len(piece)
        if self.url_bytes > MAX_URL:
            raise Refused(text(414, f"request target longer than {MAX_URL} bytes"))

    def header(self, name: bytes, value: bytes) -> None:
        self.headers += 1
        if self.headers > MAX_HEADERS:
            raise Refused(text(431, f"more than {MAX_HEADERS} header fields"))
        size = len(name) + len(value)
        if size > MAX_HEADER_LINE:
            raise Refused(text(431, f"header field {name[:40].decode('latin-1')!r} longer than {MAX_HEADER_LINE} "
                                    "bytes"))
        # the fields as parsed, exact however the head was split into reads
        self.parsed += size + 4
        if self.parsed + self.url_bytes > MAX_HEAD:
            raise Refused(_too_long_head())

    def complete(self) -> None:
        self.in_head = False

    def fed(self, was_in_head: bool, size: int) -> None:
        """After ``size`` bytes were fed: a head still incomplete that was already being read when they came holds
        them all. (A head that began inside this read is counted from the next one: its share is unknown, and
        counting the whole read could refuse a pipelined request wrongly; the bound is then one read more.)"""
        if not self.in_head:
            return
        self.head_bytes = self.head_bytes + size if was_in_head else 0
        if self.head_bytes > MAX_HEAD:
            raise Refused(_too_long_head())


def _too_long_head() -> Reply:
    return text(431, f"request line and headers longer than {MAX_HEAD} bytes")


def parse_error(message: str) -> Reply:
    """llhttp's complaint as the reply :mod:`.routes` gives for the same fault (framing is checked by llhttp)."""
    if "Content-Length" in message:
        if "Duplicate" in message:  # llhttp refuses repeated Content-Length even when the values agree
            return text(400, "conflicting Content-Length headers")
        return text(400, f"invalid Content-Length ({message})")
    return text(400, f"malformed HTTP request: {message}")


def refusal(exc: Exception) -> Reply:
    """The reply for what ``feed_data`` raised: a :class:`Refused` from a callback, an upgrade, or a parse error."""
    if isinstance(exc, Refused):
        return exc.reply
    if isinstance(exc, httptools.HttpParserCallbackError) and isinstance(exc.__context__, Refused):
        return exc.__context__.reply
    if isinstance(exc, httptools.HttpParserUpgrade):
        return text(400, "protocol upgrades are not supported")
    return parse_error(str(exc))


def evict_idle(connections: Collection[T], limit: int, idle_since: Callable[[T], float | None],
               close: Callable[[T], Any]) -> bool:
    """Make room for one more connection beside ``connections`` (the open ones, not counting the new one): at
    ``limit``, close the one idle longest (``idle_since`` None: in the middle of a request). False when every one
    is busy: the new connection is then refused."""
    if len(connections) < limit:
        return True
    oldest: T | None = None
    since = float("inf")
    for connection in connections:
        idle = idle_since(connection)
        if idle is not None and idle < since:
            oldest, since = connection, idle
    if oldest is None:
        return False
    log.info("%d connections open (limit %d): closing the one idle longest", len(connections), limit)
    close(oldest)
    return True
