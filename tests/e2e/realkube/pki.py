"""The e2e control plane's PKI: one CA, serving certificates for kube-apiserver and hami, client certificates,
and the service-account signing key pair, all written as PEM files under a temporary folder.

What a cluster installer (kubeadm) writes under /etc/kubernetes/pki, in small: kube-apiserver trusts client
certificates signed by the CA (``--client-ca-file``), signs ServiceAccount tokens with ``sa.key`` and checks them
with ``sa.pub``; kube-apiserver itself trusts hami's webhook through the ``caBundle`` of the webhook registration.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CA", "Pair"]

_PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class Pair:
    """A certificate and its key on disk."""

    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _sans(hosts: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


class CA:
    """A self-signed certificate authority in ``folder`` (``ca.crt``, ``ca.key``) that issues leaf certificates."""

    def __init__(self, folder: Path, name: str = "hami-e2e-ca") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=2))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.cert = folder / "ca.crt"
        self.cert.write_bytes(self._cert.public_bytes(_PEM))
        _write_key(folder / "ca.key", self._key)

    @property
    def pem(self) -> bytes:
        return self._cert.public_bytes(_PEM)

    def issue(self, stem: str, common_name: str, *, hosts: Sequence[str] = (), organizations: Sequence[str] = (),
              server: bool = False, client: bool = False) -> Pair:
        """A leaf certificate ``<stem>.crt``/``<stem>.key``: serving (``hosts`` as SANs) and/or client (the
        API server maps CN to the user name and O to its groups)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        subject = x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self._name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(_PEM))
        _write_key(pair.key, key)
        return pair

    def service_account_keys(self) -> tuple[Path, Path]:
        """(``sa.key``, ``sa.pub``): the RSA pair kube-apiserver signs and verifies ServiceAccount tokens with."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private, public = self.folder / "sa.key", self.folder / "sa.pub"
        _write_key(private, key)
        public.write_bytes(key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return private, public
