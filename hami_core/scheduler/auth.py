"""Who may call the scheduler's POST routes: a client certificate, or a bearer token for the extender.

Three flags, any of them (docs/security.md, "Running with mutual TLS"):

* ``--client-ca-file``: ``/filter`` and ``/bind`` need a client certificate signed by this CA (kube-scheduler
  presents one from its extender ``tlsConfig`` certFile/keyFile);
* ``--webhook-client-ca-file``: ``/webhook`` needs one signed by this CA (kube-apiserver presents one from its
  AdmissionConfiguration ``kubeConfigFile``). Two flags, so that the extender can be locked down before the API
  server's admission client is configured; the same file may be given to both;
* ``--extender-token-file``: ``/filter`` and ``/bind`` take ``Authorization: Bearer <token>`` with a token from
  this file instead (one a line, so that a new token can be rolled out before the old one is dropped). The file
  is read again when it changes (a Secret volume swaps it under a symlink), at most once a second.
  kube-scheduler's extender configuration has no header field: the token is for other callers, or for a proxy.

A TLS listener with a client CA asks every client for a certificate and verifies one it is given against its CAs
(:func:`.routes.tls_context`; a listener serving both halves pools both CAs): a certificate no CA of its signed
fails the TLS handshake. A client that sent none still connects, so that kubelet's probes reach ``/healthz`` and
``/readyz``, but gets 401 from the routes that need one. A token presented to ``/webhook`` gets 403. Without any
flag every caller is served, as HAMi does. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hami_core.plugins.errors import HamiError

__all__ = ["EXTENDER_PATHS", "WEBHOOK_PATHS", "Auth", "Refusal", "TokenFile"]

log = logging.getLogger("hami.scheduler.auth")

#: The routes a bearer token authorises (and ``--client-ca-file`` guards).
EXTENDER_PATHS = frozenset({"/filter", "/bind", "/preempt"})
#: The route ``--webhook-client-ca-file`` guards.
WEBHOOK_PATHS = frozenset({"/webhook"})
#: Longest token file read (a token is a few dozen bytes; this bounds what a wrong path could make us load).
_MAX_TOKEN_FILE = 64 << 10
#: How often a request may look at the token file's metadata for a change.
_RECHECK_S = 1.0


class TokenFile:
    """Tokens read from a file, one a line (blank lines and ``#`` comments skipped), re-read when it changes.

    A file that cannot be read, or holds no token, is an error at start-up (:class:`HamiError`, naming the file);
    later, while it is being replaced or is broken, the tokens read last stay in force and a warning is logged.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp: tuple[int, int, int] | None = None
        try:
            self._tokens = self._read()
        except (OSError, ValueError) as exc:
            raise HamiError(f"extender token file {self.path}: {exc}") from None

    def _read(self) -> tuple[bytes, ...]:
        stat = self.path.stat()
        if stat.st_size > _MAX_TOKEN_FILE:
            raise ValueError(f"{stat.st_size} bytes, more than a token file holds ({_MAX_TOKEN_FILE} at most)")
        data = self.path.read_bytes()[:_MAX_TOKEN_FILE]
        tokens = tuple(line.strip() for line in data.splitlines() if line.strip() and not line.startswith(b"#"))
        if not tokens:
            raise ValueError("holds no token")
        if any(len(token.split()) != 1 for token in tokens):
            raise ValueError("a token holds white space")
        self._stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        return tokens

    def tokens(self) -> tuple[bytes, ...]:
        now = time.monotonic()
        if now - self._checked < _RECHECK_S:
            return self._tokens
        with self._lock:
            if now - self._checked < _RECHECK_S:
                return self._tokens
            self._checked = now
            try:
                stat = self.path.stat()
                if (stat.st_ino, stat.st_mtime_ns, stat.st_size) != self._stamp:
                    self._tokens = self._read()
                    log.warning("extender token file %s changed: %d token(s) in force", self.path, len(self._tokens))
            except (OSError, ValueError) as exc:
                log.warning("extender token file %s: %s; keeping the %d token(s) read before", self.path, exc,
                            len(self._tokens))
        return self._tokens

    def matches(self, candidate: bytes) -> bool:
        # compare_digest against every token (no early exit), so timing tells nothing of which or how much matched
        found = False
        for token in self.tokens():
            found |= hmac.compare_digest(candidate, token)
        return found


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a caller is not served: 401 (not authenticated) or 403 (authenticated, not for this route)."""

    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()


class Auth:
    """The rule of one listener: the routes a client certificate authorises (and requires), and the extender's
    tokens (which authorise ``/filter`` and ``/bind``)."""

    def __init__(self, *, cert_routes: Iterable[str] = (), tokens: TokenFile | None = None) -> None:
        self.cert_routes = frozenset(cert_routes)
        self.tokens = tokens

    @classmethod
    def of(cls, client_ca_file: str | None, token_file: str | None,
           webhook_client_ca_file: str | None = None) -> Auth | None:
        """The rule the flags ask for (``--client-ca-file`` guards the extender, ``--webhook-client-ca-file`` the
        webhook); None when none is given (every caller is served)."""
        routes = (EXTENDER_PATHS if client_ca_file else frozenset()) | (
            WEBHOOK_PATHS if webhook_client_ca_file else frozenset())
        if not routes and not token_file:
            return None
        return cls(cert_routes=routes, tokens=TokenFile(token_file) if token_file else None)

    def _protects(self, path: str) -> bool:
        return path in self.cert_routes or (self.tokens is not None and path in EXTENDER_PATHS)

    def check(self, path: str, authorization: bytes | None, client_cert: bool) -> Refusal | None:
        """None when the caller may call ``path``; else why not (401/403). ``client_cert``: the caller presented
        a certificate that the listener's client CAs verified."""
        if not self._protects(path) or (client_cert and path in self.cert_routes):
            return None
        token_route = self.tokens is not None and path in EXTENDER_PATHS
        ways = " or ".join(w for w, on in (("a client certificate signed by the client CA", path in self.cert_routes),
                                           ("an extender bearer token", token_route)) if on)
        challenge = (("WWW-Authenticate", 'Bearer realm="hami-scheduler"'),) if token_route else ()
        if authorization is None:
            return Refusal(401, f"{path} needs authentication: {ways}", challenge)
        scheme, _, credential = authorization.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not credential.strip():
            return Refusal(401, f"{path}: unsupported Authorization scheme (expected Bearer)", challenge)
        if self.tokens is None or not self.tokens.matches(credential.strip()):
            return Refusal(401, f"{path}: invalid bearer token", challenge)
        if not token_route:
            return Refusal(403, f"the extender token does not authorise {path}: send a client certificate signed by "
                                "the client CA")
        return None
