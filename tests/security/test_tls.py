"""The webhook/extender server speaks TLS 1.2 and 1.3 only when given a certificate; older clients and plain
HTTP are refused cleanly and do not disturb the server."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from hami_core.scheduler.server import SchedulerServer

REVIEW = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","object":'
          b'{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}}}')


def _client(version: ssl.TLSVersion, cafile: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with warnings.catch_warnings():  # TLSv1/TLSv1_1 are deprecated names; this test needs them
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    if cafile is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.load_verify_locations(cafile)
    if version < ssl.TLSVersion.TLSv1_2:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer the old protocol at all
    return ctx


def _handshake(port: int, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        return str(tls.version())


def _permissive_server(certs: tuple[Path, Path]) -> int:
    """A control TLS endpoint that still accepts TLS 1.0: proves the old-protocol client really can connect."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.load_cert_chain(*certs)
    sock = socket.create_server(("127.0.0.1", 0))

    def accept_once() -> None:
        conn, _ = sock.accept()
        try:
            ctx.wrap_socket(conn, server_side=True).close()
        except (ssl.SSLError, OSError):
            conn.close()
        finally:
            sock.close()

    threading.Thread(target=accept_once, daemon=True).start()
    return int(sock.getsockname()[1])


def _post_review(server: SchedulerServer, ctx: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("localhost", server.address[1], context=ctx, timeout=10)
    try:
        conn.request("POST", "/webhook", body=REVIEW, headers={"Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_12_and_13_are_served(make_server: Callable[..., SchedulerServer], certs: tuple[Path, Path],
                                  version: ssl.TLSVersion) -> None:
    server = make_server(tls=True)
    assert server.url.startswith("https://")
    ctx = _client(version, cafile=certs[0])
    assert _handshake(server.address[1], ctx) == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                                                  ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    assert _post_review(server, ctx) == 200


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
def test_tls_10_and_11_are_refused(make_server: Callable[..., SchedulerServer], certs: tuple[Path, Path],
                                   version: ssl.TLSVersion) -> None:
    ctx = _client(version)
    try:
        _handshake(_permissive_server(certs), ctx)
    except ssl.SSLError as exc:
        pytest.skip(f"this OpenSSL cannot speak {version.name} even when allowed: {exc}")
    server = make_server(tls=True)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(server.address[1], ctx)
    assert server.ssl_context is not None
    assert server.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2
    # the refused client did not hurt the server
    assert _post_review(server, _client(ssl.TLSVersion.TLSv1_3, cafile=certs[0])) == 200


def test_plain_http_to_the_tls_port_fails_cleanly(make_server: Callable[..., SchedulerServer],
                                                  certs: tuple[Path, Path]) -> None:
    server = make_server(tls=True)
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.request("POST", "/webhook", body=REVIEW, headers={"Content-Type": "application/json"})
            conn.getresponse()
    finally:
        conn.close()
    assert _post_review(server, _client(ssl.TLSVersion.TLSv1_2, cafile=certs[0])) == 200


def test_without_certificates_the_server_is_plain_http(make_server: Callable[..., SchedulerServer]) -> None:
    server = make_server(tls=False)
    assert server.url.startswith("http://") and server.ssl_context is None
    with pytest.raises(ValueError, match="both a certificate and a key"):
        type(server)(server.extender, server.webhook, "127.0.0.1", 0, cert_file="/nonexistent/tls.crt")
