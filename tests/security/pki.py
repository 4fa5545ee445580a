"""A small PKI for the mutual-TLS tests: a client CA, a server certificate it signs (for localhost and 127.0.0.1),
client certificates signed by it, and a second, unrelated CA with a client certificate of its own."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path  #: the client CA (also the server certificate's issuer: clients verify the server with it)
    server: Pair
    client: Pair  #: signed by ``ca``
    stranger: Pair  #: signed by another CA


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, *,
          ca: bool = False, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                      content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False,
                                                      encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(out: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pair:
    pair = Pair(out / f"{name}.crt", out / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return pair


def make_pki(out: Path) -> Pki:
    ca_key, other_key = _key(), _key()
    ca = _cert("hami test client CA", ca_key, "hami test client CA", ca_key, ca=True)
    (out / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_key, client_key, stranger_key = _key(), _key(), _key()
    return Pki(ca=out / "ca.crt",
               server=_write(out, "server", _cert("hami-scheduler", server_key, "hami test client CA", ca_key,
                                                  server=True), server_key),
               client=_write(out, "client", _cert("system:kube-scheduler", client_key, "hami test client CA", ca_key),
                             client_key),
               stranger=_write(out, "stranger", _cert("system:kube-scheduler", stranger_key, "some other CA",
                                                      other_key), stranger_key))
