"""Who may call ``/filter``, ``/bind`` and ``/webhook``, over real TLS against every server kind: with a client CA
(``--client-ca-file``) a certificate it signed is served, one another CA signed is refused in the handshake, and
none gets 401 (while kubelet's probes still reach ``/healthz``); a bearer token (``--extender-token-file``)
authorises the extender only, is compared against every token in the file, and a changed file is read again.
Without either, everyone is served (HAMi's behaviour)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pki import Pki
from sched_helpers import gpu_pod

from hami_core.plugins.errors import HamiError
from hami_core.scheduler import auth as auth_module
from hami_core.scheduler.auth import Auth, TokenFile

FILTER = json.dumps({"Pod": gpu_pod("p"), "NodeNames": ["node-a"]}).encode()
REVIEW = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","object":'
          b'{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}}}')


def _ctx(pki: Pki, client: Any = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def _call(server: Any, ctx: ssl.SSLContext | None, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    host, port = server.address
    conn: http.client.HTTPConnection = (http.client.HTTPSConnection("localhost", port, context=ctx, timeout=30)
                                        if ctx is not None else http.client.HTTPConnection(host, port, timeout=30))
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def _mtls_server(make_server: Callable[..., Any], pki: Pki, token_file: Path | None = None, *,
                 webhook: bool = True) -> Any:
    """``--client-ca-file`` (and, with ``webhook``, ``--webhook-client-ca-file``) of the test PKI's CA."""
    return make_server(cert_file=str(pki.server.cert), key_file=str(pki.server.key), client_ca_file=str(pki.ca),
                       auth=Auth.of(str(pki.ca), str(token_file) if token_file else None,
                                    str(pki.ca) if webhook else None))


def test_a_client_certificate_of_the_client_ca_is_served(make_server: Callable[..., Any], pki: Pki) -> None:
    server = _mtls_server(make_server, pki)
    ctx = _ctx(pki, pki.client)
    status, text, _ = _call(server, ctx, "POST", "/filter", FILTER)
    assert status == 200 and json.loads(text)["NodeNames"] == ["node-a"]
    status, text, _ = _call(server, ctx, "POST", "/webhook", REVIEW)
    assert status == 200 and json.loads(text)["response"]["uid"] == "u1"


def test_no_client_certificate_gets_401_but_probes_are_served(make_server: Callable[..., Any], pki: Pki) -> None:
    server = _mtls_server(make_server, pki)
    ctx = _ctx(pki)
    for path, body in (("/filter", FILTER), ("/bind", b'{"PodName":"p"}'), ("/preempt", b'{"Pod":{}}'),
                       ("/webhook", REVIEW)):
        status, text, _ = _call(server, ctx, "POST", path, body)
        assert status == 401 and text.count("\n") == 1, (path, text)
        assert "needs authentication" in text and "client certificate" in text
    assert _call(server, ctx, "GET", "/healthz")[0] == 200  # kubelet's probe presents no certificate
    assert _call(server, ctx, "GET", "/readyz")[:2] == (200, "ok")


def test_a_client_certificate_of_another_ca_is_refused_in_the_handshake(make_server: Callable[..., Any],
                                                                       pki: Pki) -> None:
    server = _mtls_server(make_server, pki)
    # TLS 1.3 finishes the client's side of the handshake before the server has checked the client's certificate:
    # the refusal (an alert) then arrives on the first read. Either way no request is ever answered.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _call(server, _ctx(pki, pki.stranger), "POST", "/filter", FILTER)
    ctx12 = _ctx(pki, pki.stranger)
    ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _call(server, ctx12, "GET", "/healthz")
    assert _call(server, _ctx(pki, pki.client), "POST", "/webhook", REVIEW)[0] == 200  # the server is unharmed


def test_the_extender_ca_alone_leaves_the_webhook_to_kube_apiserver(make_server: Callable[..., Any],
                                                                  pki: Pki) -> None:
    """--client-ca-file without --webhook-client-ca-file: kube-scheduler must present a certificate, kube-apiserver
    (whose admission client may have none configured) need not."""
    server = _mtls_server(make_server, pki, webhook=False)
    ctx = _ctx(pki)
    assert _call(server, ctx, "POST", "/filter", FILTER)[0] == 401
    assert _call(server, ctx, "POST", "/webhook", REVIEW)[0] == 200
    assert _call(server, _ctx(pki, pki.client), "POST", "/filter", FILTER)[0] == 200


def test_a_client_ca_needs_tls(make_server: Callable[..., Any], pki: Pki) -> None:
    with pytest.raises(ValueError, match="client CA needs TLS"):
        make_server(client_ca_file=str(pki.ca))


def test_the_extender_token_authorises_filter_and_bind_only(make_server: Callable[..., Any], pki: Pki,
                                                           tmp_path: Path) -> None:
    tokens = tmp_path / "token"
    tokens.write_text("# rolled out first\nnew-token-0123\nold-token-4567\n")
    server = _mtls_server(make_server, pki, tokens)
    ctx = _ctx(pki)  # no client certificate: the token alone must do
    for token in ("new-token-0123", "old-token-4567"):
        status, text, _ = _call(server, ctx, "POST", "/filter", FILTER, {"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(text)["NodeNames"] == ["node-a"]
    for header in ("Bearer wrong-token", "Bearer new-token-012", "Basic bmV3LXRva2VuLTAxMjM=", "Bearer "):
        status, text, headers = _call(server, ctx, "POST", "/filter", FILTER, {"Authorization": header})
        assert status == 401 and "Bearer" in headers.get("www-authenticate", ""), (header, text)
    status, text, _ = _call(server, ctx, "POST", "/webhook", REVIEW, {"Authorization": "Bearer new-token-0123"})
    assert status == 403 and "does not authorise /webhook" in text


def test_a_token_alone_protects_the_extender_and_leaves_the_webhook_open(make_server: Callable[..., Any],
                                                                        tmp_path: Path) -> None:
    tokens = tmp_path / "token"
    tokens.write_text("s3cret\n")
    server = make_server(auth=Auth.of(None, str(tokens)))
    assert _call(server, None, "POST", "/filter", FILTER)[0] == 401
    assert _call(server, None, "POST", "/bind", b'{"PodName":"p"}')[0] == 401
    # /preempt deletes pods: the same token guards it
    assert _call(server, None, "POST", "/preempt", b'{"Pod":{}}')[0] == 401
    assert _call(server, None, "POST", "/preempt", b'{"Pod":{}}', {"Authorization": "Bearer s3cret"})[0] == 200
    assert _call(server, None, "POST", "/filter", FILTER, {"Authorization": "Bearer s3cret"})[0] == 200
    assert _call(server, None, "POST", "/webhook", REVIEW)[0] == 200


def test_a_changed_token_file_is_read_again(make_server: Callable[..., Any], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_module, "_RECHECK_S", 0.0)
    tokens = tmp_path / "token"
    tokens.write_text("first\n")
    server = make_server(auth=Auth.of(None, str(tokens)))
    assert _call(server, None, "POST", "/filter", FILTER, {"Authorization": "Bearer first"})[0] == 200
    replacement = tmp_path / "token.new"  # as a Secret volume does: a new file swapped in
    replacement.write_text("second\n")
    replacement.replace(tokens)
    assert _call(server, None, "POST", "/filter", FILTER, {"Authorization": "Bearer first"})[0] == 401
    assert _call(server, None, "POST", "/filter", FILTER, {"Authorization": "Bearer second"})[0] == 200
    tokens.write_text("")  # broken mid-rotation: the tokens read last stay in force
    assert _call(server, None, "POST", "/filter", FILTER, {"Authorization": "Bearer second"})[0] == 200


@pytest.mark.parametrize("content", ["", "# only a comment\n\n", "two words\n"])
def test_an_unusable_token_file_fails_at_start_naming_it(tmp_path: Path, content: str) -> None:
    tokens = tmp_path / "token"
    tokens.write_text(content)
    with pytest.raises(HamiError, match=re.escape(f"extender token file {tokens}")):
        TokenFile(tokens)
    with pytest.raises(HamiError, match=r"extender token file .*missing"):
        TokenFile(tmp_path / "missing")


def test_without_authentication_everyone_is_served(make_server: Callable[..., Any]) -> None:
    server = make_server()
    assert _call(server, None, "POST", "/filter", FILTER)[0] == 200
    assert _call(server, None, "POST", "/webhook", REVIEW)[0] == 200


def test_refusals_are_decided_before_the_body_is_read(make_server: Callable[..., Any], pki: Pki) -> None:
    """An unauthenticated caller announcing a big body gets its 401 from the headers alone."""
    server = _mtls_server(make_server, pki)
    with socket.create_connection(server.address, timeout=30) as raw, \
            _ctx(pki).wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        started = time.monotonic()
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 401 ") and time.monotonic() - started < 20
