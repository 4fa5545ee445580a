"""A self-signed certificate and key for serving the webhook and extender over TLS locally (``hami certs``).

The key is written so that nobody else can read or redirect it, even when ``--out`` is under a shared folder
such as ``/tmp``: every folder this creates is opened without following links, every folder on the way must
be ours (or root's) and not writable by others unless sticky, a link planted at ``tls.crt`` or ``tls.key`` is
refused, and each file is created afresh (``O_CREAT|O_EXCL|O_NOFOLLOW``) with its mode set on the open file:
0600 for the key, 0644 for the certificate. An existing file is replaced only with ``force`` (unlinked, then
created afresh), never written through.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hami_core.plugins.errors import HamiError

__all__ = ["CERT_MODE", "DEFAULT_HOSTS", "KEY_MODE", "CertsError", "write_self_signed"]

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
KEY_MODE = 0o600
CERT_MODE = 0o644
_DIR_MODE = 0o755
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class CertsError(HamiError):
    """The certificate or key cannot be written safely; the message names the path."""


def _strerror(exc: OSError) -> str:
    return exc.strerror or str(exc)


@contextlib.contextmanager
def _out_dir(out: Path) -> Iterator[int]:
    """A descriptor of ``out``, creating its missing folders one by one.

    Existing folders above ``out`` are followed as the system resolves them (``/tmp`` may itself be a link);
    a folder this creates, and ``out`` itself, are opened with ``O_NOFOLLOW``, so a link raced in after the
    ``mkdir`` is refused rather than followed.
    """
    parts = out.parts
    start = "/" if out.is_absolute() else "."
    names = parts[1:] if out.is_absolute() else parts
    fd = os.open(start, _DIR_FLAGS)
    try:
        where = Path(start)
        for i, name in enumerate(names):
            where = where / name
            last = i == len(names) - 1
            created = False
            try:
                os.mkdir(name, _DIR_MODE, dir_fd=fd)
                created = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise CertsError(f"cannot create folder {where}: {_strerror(exc)}") from None
            flags = _DIR_FLAGS | (os.O_NOFOLLOW if created or last else 0)
            try:
                child = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                if os.path.islink(where):
                    raise CertsError(f"{where} is a symbolic link; refusing to write a private key through it "
                                     "(remove it, or give --out a real folder)") from None
                raise CertsError(f"cannot open folder {where}: {_strerror(exc)}") from None
            os.close(fd)
            fd = child
            _check_folder(fd, where, final=last)
        if not names:
            _check_folder(fd, Path(start), final=True)
        yield fd
    finally:
        os.close(fd)


def _check_folder(fd: int, where: Path, *, final: bool) -> None:
    """Refuse a folder in which someone else could swap our files or folders: one owned by another user than
    this one or root, or one others may write without the sticky bit (in a sticky folder such as /tmp only an
    entry's owner may rename or remove it). Group write is tolerated above the output folder (user-private
    groups make home folders group-writable), not in it."""
    info = os.fstat(fd)
    if info.st_uid not in (os.geteuid(), 0):
        raise CertsError(f"{where} belongs to uid {info.st_uid}, not to this user or root: its owner could replace "
                         "the key; choose a folder of your own for --out")
    writable = stat.S_IWOTH | (stat.S_IWGRP if final else 0)
    if info.st_mode & writable and not info.st_mode & stat.S_ISVTX:
        raise CertsError(f"{where} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}) and not "
                         "sticky: they could replace the key; choose a folder only you can write for --out")


def _existing(fd: int, name: str, path: Path, force: bool) -> bool:
    """Whether ``name`` exists in the folder ``fd`` and may be replaced: refused when it is a link, not a regular
    file, or (without ``force``) there at all."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CertsError(f"cannot inspect {path}: {_strerror(exc)}") from None
    if stat.S_ISLNK(info.st_mode):
        raise CertsError(f"{path} is a symbolic link; refusing to write through it (remove it first)")
    if not stat.S_ISREG(info.st_mode):
        raise CertsError(f"{path} exists and is not a regular file")
    if not force:
        raise CertsError(f"{path} already exists; pass --force to replace it")
    return True


def _remove(fd: int, name: str, path: Path) -> None:
    """Unlink (never truncate or follow) the old file: the new one is created afresh."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CertsError(f"cannot remove {path}: {_strerror(exc)}") from None


def _create(fd: int, name: str, path: Path, data: bytes, mode: int) -> None:
    """Create ``name`` afresh (a file or link that appeared since :func:`_prepare` makes this fail) with
    exactly ``mode`` (set on the open file, so the umask cannot widen or narrow it), and write ``data``."""
    try:
        out = os.open(name, _FILE_FLAGS, mode, dir_fd=fd)
    except FileExistsError:
        raise CertsError(f"{path} appeared while writing (another process?); nothing was overwritten") from None
    except OSError as exc:
        raise CertsError(f"cannot create {path}: {_strerror(exc)}") from None
    try:
        os.fchmod(out, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        os.fsync(out)
    except OSError as exc:
        raise CertsError(f"cannot write {path}: {_strerror(exc)}") from None
    finally:
        os.close(out)


def _certificate(hosts: Sequence[str], days: int) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def write_self_signed(out_dir: str | Path, hosts: Sequence[str] = DEFAULT_HOSTS, *, days: int = 365,
                      force: bool = False) -> tuple[Path, Path]:
    """Write ``tls.crt`` (mode 0644) and ``tls.key`` (mode 0600): P-256, self-signed, SANs = ``hosts``.

    Hosts that parse as IP addresses become IP SANs, others DNS SANs; the first host is the common name.
    Returns (certificate path, key path). Raises :class:`CertsError`, naming the path, for a symbolic link at
    either file or at ``out_dir``, an existing file without ``force``, an output folder others could swap files
    in, or any error of the file system. Every refusal comes before either file is touched.
    """
    if not hosts or any(not isinstance(h, str) or not h.strip() for h in hosts):
        raise CertsError(f"hosts: at least one non-empty host name is needed, got {list(hosts)!r}")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise CertsError(f"days: must be a whole number of days, 1 or more, got {days!r}")
    out = Path(out_dir)
    cert_path, key_path = out / "tls.crt", out / "tls.key"
    cert_pem, key_pem = _certificate(hosts, days)
    try:
        with _out_dir(out) as fd:
            # both checked before either is touched, so a refusal leaves the folder as it was
            files = (("tls.key", key_path), ("tls.crt", cert_path))
            for name, path in [f for f in files if _existing(fd, *f, force)]:
                _remove(fd, name, path)
            _create(fd, "tls.key", key_path, key_pem, KEY_MODE)
            _create(fd, "tls.crt", cert_path, cert_pem, CERT_MODE)
    except OSError as exc:  # opening "/" or "." itself
        raise CertsError(f"cannot write certificates to {out}: {_strerror(exc)}") from None
    return cert_path, key_path
