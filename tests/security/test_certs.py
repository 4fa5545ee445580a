"""``hami certs --out`` never writes the private key where someone else put it: a link planted at tls.key, tls.crt
or the output folder is refused (with ``--force`` too), files are created afresh (O_EXCL|O_NOFOLLOW) with
mode 0600 for the key and 0644 for the certificate whatever the umask, an existing file is replaced only with
``--force`` and then unlinked (a hard link to someone's file is not written through), and a folder others
could swap files in is refused. Every refusal names the path and leaves the folder as it was."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

import hami_core.scheduler.certs as certs
from hami_core.cli import main
from hami_core.scheduler.certs import CertsError, write_self_signed

VICTIM = b"precious\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(VICTIM)
    path.chmod(0o644)
    return path


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _hami_certs(capsys: pytest.CaptureFixture[str], out: Path, *extra: str) -> tuple[int, str]:
    code = main(["certs", "--out", str(out), *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077])
def test_modes_are_exact_whatever_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        cert, key = write_self_signed(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert (_mode(key), _mode(cert)) == (0o600, 0o644)
    loaded = load_pem_private_key(key.read_bytes(), None)
    assert x509.load_pem_x509_certificate(cert.read_bytes()).public_key() == loaded.public_key()


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("name", ["tls.key", "tls.crt"])
def test_a_link_at_either_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, victim: Path,
                                          name: str, force: bool) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    code, err = _hami_certs(capsys, out, *(["--force"] if force else []))
    assert code != 0 and f"{out / name} is a symbolic link" in err, err
    assert victim.read_bytes() == VICTIM and _mode(victim) == 0o644
    assert sorted(p.name for p in out.iterdir()) == [name]  # the other file was not written either


def test_a_dangling_link_is_refused_not_created_through(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere.key"
    (out / "tls.key").symlink_to(target)
    code, err = _hami_certs(capsys, out)
    assert code != 0 and "is a symbolic link" in err and not target.exists()


def test_a_link_as_the_output_folder_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    out = tmp_path / "out"
    out.symlink_to(theirs, target_is_directory=True)
    code, err = _hami_certs(capsys, out)
    assert code != 0 and f"{out} is a symbolic link" in err and not list(theirs.iterdir())


def test_a_link_raced_into_a_folder_it_created_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    real_mkdir = os.mkdir

    def mkdir_then_swap(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        if name == "made":  # another process swaps the new folder for a link before it is opened
            os.rmdir(name, dir_fd=dir_fd)
            os.symlink(theirs, name, dir_fd=dir_fd)

    monkeypatch.setattr(certs.os, "mkdir", mkdir_then_swap)
    with pytest.raises(CertsError, match=r"made is a symbolic link"):
        write_self_signed(tmp_path / "made" / "out")
    assert not list(theirs.iterdir())


def test_a_file_raced_in_after_the_check_is_not_overwritten(tmp_path: Path, victim: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = certs._existing

    def check_then_plant(fd: int, name: str, path: Path, force: bool) -> bool:
        found = real(fd, name, path, force)
        if name == "tls.key":
            os.symlink(victim, name, dir_fd=fd)
        return found

    monkeypatch.setattr(certs, "_existing", check_then_plant)
    with pytest.raises(CertsError, match=r"tls.key appeared while writing"):
        write_self_signed(tmp_path / "out")
    assert victim.read_bytes() == VICTIM


def test_existing_files_need_force_and_are_replaced_afresh(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          umask: None) -> None:
    out = tmp_path / "out"
    assert _hami_certs(capsys, out)[0] == 0
    first_key = (out / "tls.key").read_bytes()
    code, err = _hami_certs(capsys, out)
    assert code != 0 and f"{out / 'tls.key'} already exists; pass --force to replace it" in err
    assert (out / "tls.key").read_bytes() == first_key
    # an old key with loose permissions, hard-linked from somewhere: --force unlinks it, never writes through it
    (out / "tls.key").chmod(0o666)
    shared = tmp_path / "shared-copy"
    os.link(out / "tls.key", shared)
    old_inode = (out / "tls.key").stat().st_ino
    assert _hami_certs(capsys, out, "--force")[0] == 0
    assert shared.read_bytes() == first_key and _mode(shared) == 0o666
    new = out / "tls.key"
    assert new.stat().st_ino != old_inode and new.read_bytes() != first_key
    assert (_mode(new), _mode(out / "tls.crt")) == (0o600, 0o644)


def test_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(CertsError, match=r"shared is writable by other users \(mode 0777\) and not sticky"):
        write_self_signed(shared)
    with pytest.raises(CertsError, match=r"shared is writable by other users"):
        write_self_signed(shared / "mine")  # a folder under it could be renamed away too
    assert not list(shared.iterdir())
    shared.chmod(0o1777)  # sticky, like /tmp: only an entry's owner may rename or remove it
    _, key = write_self_signed(shared / "mine")
    assert _mode(key) == 0o600
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o775)
    with pytest.raises(CertsError, match=r"group is writable by other users \(mode 0775\)"):
        write_self_signed(group)
    write_self_signed(group / "inner")  # group write above the output folder is tolerated


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_another_users_folder_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    with pytest.raises(CertsError, match=r"theirs belongs to uid 12345"):
        write_self_signed(theirs)


def test_errors_name_the_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _hami_certs(capsys, blocker / "out")
    assert code != 0 and str(blocker) in err, err
    (tmp_path / "dir" / "tls.key").mkdir(parents=True)
    code, err = _hami_certs(capsys, tmp_path / "dir", "--force")
    assert code != 0 and f"{tmp_path / 'dir' / 'tls.key'} exists and is not a regular file" in err
    assert main(["certs", "--out", str(tmp_path / "d"), "--days", "0"]) != 0
    assert "days: must be a whole number of days, 1 or more" in capsys.readouterr().err
