"""The monitor's /metrics server against hostile clients, over raw sockets: a long URL (414), oversized headers
(431), a client that trickles its request (dropped at the read deadline while others are served) and more
connections than the limit (503 at once, served again when they close)."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

from monitor_helpers import scrape, write_region

from hami_core.monitor.httpserver import MAX_HEAD, MAX_REQUEST_LINE

U0 = "GPU-00000000-1111-2222-3333-444444444444"
WAIT_S = 30.0


def _connect(m) -> socket.socket:
    return socket.create_connection(("127.0.0.1", m.port), timeout=WAIT_S)


def _exchange(m, data: bytes) -> bytes:
    with _connect(m) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(data)  # the server may answer and close before reading everything we send
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
        return b"".join(chunks)


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_long_url_gets_414_and_large_headers_431(root: Path, start_monitor) -> None:
    write_region(root, "uid", "c", uuids=[U0], limits=[5])
    m = start_monitor(None, feedback=False)
    url = "/metrics?" + "a" * MAX_REQUEST_LINE
    assert _status(_exchange(m, f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())) == 414
    headers = "".join(f"X-Pad-{i}: {'b' * 1000}\r\n" for i in range(MAX_HEAD // 1000 + 1))
    assert _status(_exchange(m, f"GET /metrics HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())) == 431
    ok = _exchange(m, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _status(ok) == 200 and b'container="c"' in ok


def test_a_trickling_client_is_dropped_at_the_deadline(root: Path, start_monitor) -> None:
    write_region(root, "uid", "c", uuids=[U0], limits=[5])
    m = start_monitor(None, feedback=False, read_deadline_s=1.0)
    with _connect(m) as slow:
        start = time.monotonic()
        closed_after = None
        for ch in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 200:
            # one byte every 0.1 s: each read is quick, but the whole head would take 20 s
            try:
                slow.sendall(bytes([ch]))
            except OSError:
                closed_after = time.monotonic() - start
                break
            assert scrape(m.url)  # everyone else is served meanwhile
            time.sleep(0.1)
            slow.setblocking(False)
            try:
                if slow.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except BlockingIOError:
                pass
            finally:
                slow.setblocking(True)
        assert closed_after is not None and closed_after < 5, closed_after


def test_connections_beyond_the_limit_get_503_until_others_close(root: Path, start_monitor) -> None:
    write_region(root, "uid", "c", uuids=[U0], limits=[5])
    m = start_monitor(None, feedback=False, max_connections=4, read_deadline_s=20.0)
    idle = [_connect(m) for _ in range(4)]
    try:
        time.sleep(0.3)  # let the server accept them all
        busy = _exchange(m, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(busy) == 503 and b"too many connections" in busy
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + WAIT_S
    while True:  # the slots come back once the server sees the idle clients go
        response = _exchange(m, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        if _status(response) == 200:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert b'container="c"' in response
