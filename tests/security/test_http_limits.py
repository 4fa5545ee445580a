"""Request limits of the scheduler's HTTP server over raw sockets: body size (413), chunked bodies (411), lying
or malformed Content-Length, nesting depth, ``null`` bodies, and clients that stall (dropped after the client
timeout instead of holding a thread forever, while other clients are served)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Callable

import pytest

from hami_core.scheduler.server import MAX_BODY, MAX_DEPTH, SchedulerServer

#: Generous bound for waiting on the server to close a stalled connection (it does so after 1 s).
WAIT_S = 30.0


def _raw(server: SchedulerServer, data: bytes) -> socket.socket:
    sock = socket.create_connection(server.address, timeout=WAIT_S)
    sock.sendall(data)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def _post(server: SchedulerServer, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection(*server.address, timeout=WAIT_S)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def _review(pod: object) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u", "object": pod}}).encode()


def test_oversized_body_gets_413_without_being_read(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    # headers only: the server must answer from Content-Length alone, not wait for a megabyte
    with _raw(server, f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode()) as s:
        response = _read_all(s)
    assert _status(response) == 413 and b"exceeds the 1048576-byte limit" in response
    status, _ = _post(server, "/webhook", _review({"metadata": {"name": "p"}}))
    assert status == 200


def test_chunked_body_gets_411(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    request = b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    with _raw(server, request) as s:
        response = _read_all(s)
    assert _status(response) == 411 and b"send Content-Length" in response


@pytest.mark.parametrize("length", ["+2", "1_0", "0x2", "abc", "-1", "0", ""])
def test_malformed_content_length_gets_400(make_server: Callable[..., SchedulerServer], length: str) -> None:
    server = make_server()
    with _raw(server, f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n{{}}".encode()) as s:
        response = _read_all(s)
    assert _status(response) == 400, response


def test_conflicting_content_lengths_get_400(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    request = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}"
    with _raw(server, request) as s:
        response = _read_all(s)
    assert _status(response) == 400 and b"conflicting Content-Length" in response


def test_body_shorter_than_its_content_length_is_dropped_after_the_timeout(
        make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    with _raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"apiVersion\":") as s:
        # meanwhile the server still answers others
        assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200
        assert _read_all(s) == b""  # closed by the server, no half-answer


def test_truncated_body_of_a_closed_client_is_not_answered(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    with _raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{}") as s:
        s.shutdown(socket.SHUT_WR)
        assert _read_all(s) == b""
    assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200


def test_stalled_headers_are_dropped_and_do_not_block_others(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    stalled = [_raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\n") for _ in range(4)]
    try:
        assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200
        for sock in stalled:
            assert _read_all(sock) == b""  # the server hung up on each
    finally:
        for sock in stalled:
            sock.close()


def test_silent_tls_client_is_dropped(make_server: Callable[..., SchedulerServer], certs) -> None:
    server = make_server(tls=True)
    with socket.create_connection(server.address, timeout=WAIT_S) as silent:
        ctx = ssl.create_default_context(cafile=str(certs[0]))
        conn = http.client.HTTPSConnection("localhost", server.address[1], context=ctx, timeout=WAIT_S)
        conn.request("POST", "/webhook", body=_review({"metadata": {"name": "p"}}))
        assert conn.getresponse().status == 200
        conn.close()
        assert _read_all(silent) == b""  # handshake never started: closed after the timeout


def test_null_and_scalar_bodies_get_400(make_server: Callable[..., SchedulerServer]) -> None:
    # Regression: a JSON ``null`` body was mistaken for "already answered" and the client waited forever.
    server = make_server()
    for path in ("/filter", "/bind", "/webhook"):
        for body in (b"null", b"1", b'"x"', b"[]"):
            status, text = _post(server, path, body)
            assert status == 400 and text.count("\n") == 1 and "Traceback" not in text, (path, body, text)


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 150_000])
def test_deeply_nested_bodies_get_400(make_server: Callable[..., SchedulerServer], depth: int) -> None:
    server = make_server()
    body = b'{"apiVersion":"admission.k8s.io/v1","request":{"uid":"u","object":' + b'{"a":' * depth + b"1" \
        + b"}" * depth + b"}}"
    status, text = _post(server, "/webhook", body)
    assert status == 400 and f"nested more than {MAX_DEPTH} levels" in text


def test_nesting_up_to_the_limit_is_served(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    # review (1) > request (2) > object (3) > spec (4) > x ... : MAX_DEPTH levels in all
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "x": _nested(MAX_DEPTH - 4)}}
    status, text = _post(server, "/webhook", _review(pod))
    assert status == 200, text
