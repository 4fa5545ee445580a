"""Request limits of the scheduler's HTTP servers over raw sockets: body size (413), chunked bodies (411), lying
or malformed Content-Length, nesting depth, ``null`` bodies, integers Python will not convert, clients that stall
(dropped after the client timeout) or trickle (dropped at the request deadline), URL (414) and header (431)
limits, 500 clients at once, the per-endpoint bound (503 past it, other endpoints still served) and the
connection bound (the longest idle closed to make room)."""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from hami_core.scheduler.routes import MAX_HEAD, MAX_HEADER_LINE, MAX_HEADERS, MAX_URL
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


# ------------------------------------------------------------------------------------------- issue 26

def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after its reply counts as the end)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


@pytest.mark.parametrize("path", ["/filter", "/webhook", "/bind"])
def test_a_5000_digit_integer_gets_400_and_the_server_keeps_answering(
        make_server: Callable[..., SchedulerServer], path: str) -> None:
    # Python refuses to convert integers of over 4,300 digits with ValueError, which is no JSONDecodeError
    server = make_server()
    status, text = _post(server, path, b'{"Pod": ' + b"7" * 5000 + b"}")
    assert status == 400 and "number" in text and text.count("\n") == 1
    assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200


def test_500_concurrent_clients_are_all_answered(make_server: Callable[..., SchedulerServer]) -> None:
    """Connections made all at once, before the server accepts any: a listen backlog of 5 reset most of them."""
    server = make_server(client_timeout_s=WAIT_S, request_timeout_s=WAIT_S)
    socks = []
    try:
        for _ in range(500):
            sock = socket.create_connection(server.address, timeout=WAIT_S)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            socks.append(sock)
        statuses = [_status(_answer(sock)) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert statuses == [200] * 500


def test_a_url_over_the_limit_gets_414_without_being_buffered(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server()
    with _raw(server, b"GET /" + b"a" * (MAX_URL + 1) + b" HTTP/1.1\r\nHost: x\r\n\r\n") as s:
        response = _answer(s)
    assert _status(response) == 414
    # a URL of 64 MiB: refused after its first kilobytes, long before the client could have sent it all
    with socket.create_connection(server.address, timeout=WAIT_S) as s:
        sent = 0
        with pytest.raises(OSError):
            s.sendall(b"GET /")
            chunk = b"a" * (1 << 16)
            while sent < 64 << 20:
                s.sendall(chunk)
                sent += len(chunk)
        assert sent < 64 << 20
    assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200


@pytest.mark.parametrize("head", [
    b"X-Long: " + b"a" * (MAX_HEADER_LINE + 1) + b"\r\n",  # one header line
    b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)),  # too many headers
    b"".join(b"X-%d: %s\r\n" % (i, b"a" * 1000) for i in range(MAX_HEAD // 1000 + 1)),  # too many bytes in all
])
def test_header_limits_get_431(make_server: Callable[..., SchedulerServer], head: bytes) -> None:
    server = make_server()
    with _raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\n" + head + b"Content-Length: 2\r\n\r\n{}") as s:
        response = _answer(s)
    assert _status(response) == 431 and response.split(b"\r\n\r\n", 1)[1].count(b"\n") == 1  # one line


def test_a_header_line_of_64_mib_is_refused_long_before_its_end(make_server: Callable[..., SchedulerServer]) -> None:
    """httptools joins a header's pieces until its line ends: the head is counted across reads instead."""
    server = make_server()
    with socket.create_connection(server.address, timeout=WAIT_S) as s:
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Huge: ")
        sent = 0
        with pytest.raises(OSError):
            chunk = b"a" * (1 << 16)
            while sent < 64 << 20:
                s.sendall(chunk)
                sent += len(chunk)
        assert sent < 64 << 20


def _trickled_until_dropped(s: socket.socket, byte: bytes, within_s: float = 15.0) -> bool:
    """Send ``byte`` every 250 ms until the server drops the connection (True) or ``within_s`` has passed (False):
    without a deadline the trickle would be served for ever."""
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        try:
            s.sendall(byte)
        except OSError:
            return True
        readable, _, _ = select.select([s], [], [], 0.25)
        if readable and _answer(s) == b"":
            return True
    return False


def test_a_request_trickled_a_byte_at_a_time_is_dropped_at_its_deadline(
        make_server: Callable[..., SchedulerServer]) -> None:
    """Slowloris: each byte comes well within the idle timeout (1 s), but the request never ends; it is dropped
    once the request deadline (1 s here) has passed since its first byte, not left open as long as it trickles."""
    server = make_server(client_timeout_s=1.0, request_timeout_s=1.0)
    with socket.create_connection(server.address, timeout=WAIT_S) as s:
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\n")
        assert _trickled_until_dropped(s, b"X"), "the trickling client was never dropped"
    assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200


def test_a_body_trickled_a_byte_at_a_time_is_dropped_at_its_deadline(
        make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server(client_timeout_s=1.0, request_timeout_s=1.0)
    with socket.create_connection(server.address, timeout=WAIT_S) as s:
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        assert _trickled_until_dropped(s, b" "), "the trickling client was never dropped"


class BlockingWebhook:
    """A webhook whose reviews (those of pods with a ``pad`` annotation, with ``padded_only``) wait until the test
    lets them go, counting those that started."""

    def __init__(self, padded_only: bool = False) -> None:
        self.go = threading.Event()
        self.started = threading.Semaphore(0)
        self.padded_only = padded_only

    def review(self, body: Any) -> dict[str, object]:
        padded = "pad" in ((body["request"]["object"].get("metadata") or {}).get("annotations") or {})
        if padded or not self.padded_only:
            self.started.release()
            assert self.go.wait(WAIT_S)
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u",
                                                                                           "allowed": True}}


def test_an_endpoint_holds_at_most_its_limit_and_sheds_the_rest_with_503(
        make_server: Callable[..., SchedulerServer]) -> None:
    """A flood of one endpoint is bounded by count: past its limit (here 6 reviews: 4 being handled, 2 waiting for
    a thread), a review gets 503 from its headers alone, while /filter is still served; once the flood drains,
    reviews are served again."""
    webhook = BlockingWebhook()
    server = make_server(webhook=webhook, limits={"/webhook": 6}, client_timeout_s=WAIT_S, request_timeout_s=WAIT_S)
    body = _review({"metadata": {"name": "p"}})
    held = [_raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body)) for _ in range(6)]
    try:
        for _ in range(4):  # the review pool's threads are all in the handler
            assert webhook.started.acquire(timeout=WAIT_S)
        time.sleep(0.2)  # the two others reach the server's queue
        shed = [_post(server, "/webhook", body) for _ in range(3)]
        assert [s for s, _ in shed] == [503] * 3 and all("busy" in t for _, t in shed)
        with _raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n") as s:
            head = _answer(s)  # announced a big body: refused from the headers, none of it read
        assert _status(head) == 503 and b"Retry-After: 1" in head.replace(b"retry-after", b"Retry-After")
        filt = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "uid-default-p"},
                                   "spec": {"containers": [{"name": "c"}]}}, "NodeNames": ["node-a"]}).encode()
        assert _post(server, "/filter", filt)[0] == 200  # another endpoint is not held up
    finally:
        webhook.go.set()
    assert all(_status(_answer(s)) == 200 for s in held)
    for s in held:
        s.close()
    assert _post(server, "/webhook", body)[0] == 200


def test_bulk_bodies_have_a_lane_of_their_own(make_server: Callable[..., SchedulerServer]) -> None:
    """Clients posting bodies over 256 KiB in a loop: at most 2 such requests per endpoint are held (one handled,
    one waiting), the third gets 503, and the small reviews kube-apiserver sends are still served meanwhile."""
    webhook = BlockingWebhook(padded_only=True)
    server = make_server(webhook=webhook, client_timeout_s=WAIT_S, request_timeout_s=WAIT_S)
    big = _review({"metadata": {"name": "p", "annotations": {"pad": "x" * (300 << 10)}}})
    held = [_raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(big), big)) for _ in range(2)]
    try:
        assert webhook.started.acquire(timeout=WAIT_S)  # one in the bulk thread, the other waiting for it
        time.sleep(0.2)
        assert not webhook.started.acquire(timeout=0.3)  # one at a time
        with _raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(big)) as s:
            assert _status(_answer(s)) == 503
        for _ in range(5):
            assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200
    finally:
        webhook.go.set()
    assert all(_status(_answer(s)) == 200 for s in held)
    for s in held:
        s.close()


def test_past_the_connection_limit_the_longest_idle_connection_is_closed(
        make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server(max_connections=4, client_timeout_s=WAIT_S, request_timeout_s=WAIT_S)
    idle = []
    for _ in range(4):
        sock = socket.create_connection(server.address, timeout=WAIT_S)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        idle.append(sock)
        time.sleep(0.05)  # an order of idleness
    try:
        assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200  # a fifth is served
        assert _answer(idle[0]) == b""  # by closing the one idle longest
        for sock in idle[1:]:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()


def test_when_every_connection_is_mid_request_a_new_one_gets_503(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server(max_connections=3, client_timeout_s=WAIT_S, request_timeout_s=WAIT_S)
    busy = [_raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\n") for _ in range(3)]  # heads never finished
    try:
        time.sleep(0.2)
        with _raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") as s:
            response = _answer(s)
        assert _status(response) == 503
    finally:
        for sock in busy:
            sock.close()
    time.sleep(0.2)
    assert _post(server, "/webhook", _review({"metadata": {"name": "p"}}))[0] == 200


def test_a_refused_client_still_sending_its_body_reads_the_refusal(
        make_server: Callable[..., SchedulerServer]) -> None:
    """Closing a socket with unread bytes resets it, and the client never reads why: the server lets it finish."""
    webhook = BlockingWebhook()
    server = make_server(webhook=webhook, limits={"/webhook": 1})
    body = _review({"metadata": {"name": "p", "annotations": {"big": "x" * 200_000}}})  # under the bulk size
    held = _raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    try:
        assert webhook.started.acquire(timeout=WAIT_S)
        conn = http.client.HTTPConnection(*server.address, timeout=WAIT_S)
        conn.request("POST", "/webhook", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 503
        conn.close()
    finally:
        webhook.go.set()
        held.close()
