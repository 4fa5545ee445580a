"""Reference points for sections 2 and 3 of ``make bench``: what HTTP alone costs a Python extender here.

Issue 11 asks ``/filter`` to answer within 2x of the JSON floor (decoding the ExtenderArgs body and encoding
the reply) and filter+bind to sustain 1,000 pods a second. These two servers tell how much of that any Python
extender on this machine has left for scheduling:

* :class:`NullExtender` behind the scheduler's own servers (``asyncio`` or ``uvicorn``): ``/filter`` decodes the
  body and answers its first node name, ``/bind`` answers success. It does the JSON floor's work and the server's,
  and nothing of scheduling: no handler work can make that server answer sooner or bind more pods a second.
* :class:`BareServer`: an asyncio protocol that frames requests by ``Content-Length`` alone and answers on the
  event loop (no thread hop, no header checks, no timeouts, no TLS), measured with :class:`BareClient`, a raw
  socket. It is not a server to deploy; it is the least a Python HTTP extender can pay per request.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

__all__ = ["BareClient", "BareServer", "NullExtender", "NullWebhook", "null_reply", "start_null"]


def null_reply(body: Any) -> dict[str, Any]:
    """The reply of an extender that schedules nothing: the first candidate node for a filter, success for a bind."""
    # kube-scheduler writes ``nodenames`` (its Go struct tags); the benchmarks' clients write ``NodeNames``
    names = next((v for k, v in body.items() if k.lower() == "nodenames"), None) if isinstance(body, dict) else None
    if names is not None:
        return {"NodeNames": names[:1], "FailedNodes": {}, "Error": ""}
    return {"Error": ""}


class NullExtender:
    """The :class:`~hami_core.scheduler.extender.Extender` interface the servers call, doing nothing."""

    def filter(self, body: Any) -> dict[str, Any]:
        return null_reply(body)

    def bind(self, body: Any) -> dict[str, Any]:
        return null_reply(body)


class NullWebhook:
    def review(self, body: Any) -> dict[str, Any]:
        return {}


def start_null(server: str, port: int = 0) -> Any:
    """The scheduler's ``server`` (``asyncio`` or ``uvicorn``) serving :class:`NullExtender` on 127.0.0.1,
    started; stop it with ``shutdown()``."""
    from hami_core.scheduler.app import make_server

    srv = make_server(server, NullExtender(), NullWebhook(), "127.0.0.1", port)  # type: ignore[arg-type]
    srv.start()
    return srv


class _BareProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            size = 0
            for line in self.buf[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    size = int(line[15:])
            if len(self.buf) < end + 4 + size:
                return
            raw, self.buf = self.buf[end + 4:end + 4 + size], self.buf[end + 4 + size:]
            out = json.dumps(null_reply(json.loads(raw))).encode() if size else b""
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(out), out))


class BareServer:
    """:class:`_BareProtocol` on its own event loop thread; ``address`` is (host, port)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._server = self.loop.run_until_complete(self.loop.create_server(_BareProtocol, "127.0.0.1", 0))
        self.address: tuple[str, int] = self._server.sockets[0].getsockname()[:2]
        self._thread = threading.Thread(target=self.loop.run_forever, name="bare-http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        async def close() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


class BareClient:
    """One keep-alive connection over a raw socket: the request in one ``sendall``, the reply framed by its
    ``Content-Length`` (the bare server's own framing; no chunked replies)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: bytes) -> Any:
        head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        self.sock.sendall(head % (path.encode(), len(body)) + body)
        data = b""
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{path}: connection closed mid-reply")
            data += chunk
            end = data.find(b"\r\n\r\n")
            if end < 0:
                continue
            size = next(int(line[15:]) for line in data[:end].split(b"\r\n") if line[:15].lower() == b"content-length:")
            if len(data) >= end + 4 + size:
                return json.loads(data[end + 4:end + 4 + size])

    def close(self) -> None:
        self.sock.close()


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/null_extender.py --port P``: serve the null extender until SIGTERM (``make bench-e2e``
    runs it as kube-scheduler's extender in its own process, as hami runs in its own)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=("asyncio", "uvicorn"), default="asyncio")
    args = parser.parse_args(argv)
    srv = start_null(args.server, args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"null extender on {srv.url}", flush=True)
    stop.wait()
    srv.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
