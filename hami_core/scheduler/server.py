"""Listener addresses (:func:`parse_bind`) and the name of the scheduler's default HTTP server.

The threaded server that lived here (``--http-server threaded``: ``http.server``, one thread per connection) was
retired in issue 26: it parsed headers with ``email`` and spent a thread per connection, so bounding the whole
request's arrival time (a thread blocked in ``readline`` sees only per-read timeouts), the header total, and the
connections open would each have needed a watchdog thread or a rewrite, and it measured no faster than the asyncio
server. :class:`SchedulerServer` is now the default server, :class:`.aioserver.AsyncSchedulerServer`.
"""

from __future__ import annotations

from hami_core.scheduler.aioserver import AsyncSchedulerServer
from hami_core.scheduler.routes import CLIENT_TIMEOUT_S, MAX_BODY, MAX_DEPTH, too_deep

__all__ = ["CLIENT_TIMEOUT_S", "MAX_BODY", "MAX_DEPTH", "SchedulerServer", "parse_bind", "too_deep"]

#: The default HTTP server (what ``--http-server`` chooses unless told otherwise).
SchedulerServer = AsyncSchedulerServer


def parse_bind(text: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (``:9395`` and a bare port ``9395`` = all interfaces, ``[::1]:80`` for IPv6, a bare host takes
    ``default_port``) → (host, port). Raises ``ValueError`` saying what is wrong: a port that is not a number from 0
    to 65535 (0 = any free port), an IPv6 address without brackets, an empty host in brackets, an empty address."""
    text = text.strip()
    if not text:
        raise ValueError(f"invalid address '': expected HOST:PORT, :PORT or PORT, e.g. 127.0.0.1:{default_port}")
    if text.isascii() and text.isdigit():
        # a bare port is ":PORT" (all interfaces), as --metrics-bind's ":9395"; it used to be read as a host
        # named "9543" on the default port
        text = ":" + text
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or not inside:
            raise ValueError(f"invalid address {text!r}: expected an IPv6 address in brackets, "
                             f"e.g. [::1]:{default_port}")
        if rest and not rest.startswith(":"):
            raise ValueError(f"invalid address {text!r}: expected :PORT after ]")
        host, port = inside, rest[1:] if rest else str(default_port)
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            host, port = text, str(default_port)
        elif ":" in host:
            raise ValueError(f"invalid address {text!r}: an IPv6 address goes in brackets, e.g. [::1]:{default_port}")
        host = host or "0.0.0.0"
    if not port.isascii() or not port.isdigit():
        raise ValueError(f"invalid address {text!r}: port must be a number from 0 to 65535")
    number = int(port)
    if number > 65535:
        raise ValueError(f"invalid address {text!r}: port {number} is out of range (0 to 65535)")
    return host, number
