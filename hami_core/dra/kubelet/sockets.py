"""Unix sockets for kubelet-facing gRPC servers: bound with safe permissions, stale files handled.

A socket is bound inside a fresh 0700 directory, made 0600, then renamed into place: it is never reachable with
looser permissions, even for an instant (a ``chmod`` after ``bind`` would leave a window). What is at the target
path first: nothing is fine; a socket nobody answers on (a crashed plugin's) is removed; a socket a live server
answers on, or anything that is not a socket (a file, a directory, a symlink), is refused with an error naming the
path, so the plugin never deletes what is not its own.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc

from hami_core.plugins.errors import HamiError

__all__ = ["SocketError", "bind_unix", "clear_stale"]

SOCKET_MODE = 0o600
#: sun_path is 108 bytes on Linux, NUL included.
MAX_PATH = 107


class SocketError(HamiError):
    """The socket path is unusable (in use, not a socket, too long)."""


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def clear_stale(path: Path) -> None:
    """Remove a stale socket at ``path``; :class:`SocketError` when the path is in use or not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketError(f"{path}: exists and is not a socket; refusing to replace it")
    if _answers(path):
        raise SocketError(f"{path}: another server is listening there")
    path.unlink(missing_ok=True)


def bind_unix(path: Path, make_server: Callable[[], grpc.Server]) -> grpc.Server:
    """A started gRPC server listening on unix socket ``path`` (mode 0600), from ``make_server()`` (services
    added, not yet started)."""
    path = Path(os.path.abspath(path))
    if len(str(path).encode()) > MAX_PATH:
        raise SocketError(f"{path}: longer than the {MAX_PATH} bytes a unix socket path may have")
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_stale(path)
    # 0700; a dot name, which kubelet's plugin watcher ignores (it sees the socket when it is renamed in)
    tmpdir = Path(tempfile.mkdtemp(prefix=".s", dir=path.parent))
    tmp = tmpdir / "s"
    if len(str(tmp).encode()) > MAX_PATH:
        os.rmdir(tmpdir)
        raise SocketError(f"{path}: its directory is too deep for a unix socket path ({MAX_PATH} bytes at most)")
    server = make_server()
    try:
        if server.add_insecure_port(f"unix://{tmp}") == 0:
            raise SocketError(f"{path}: cannot bind")
        server.start()
        os.chmod(tmp, SOCKET_MODE)
        os.rename(tmp, path)
    except BaseException:
        server.stop(grace=None)
        raise
    finally:
        tmp.unlink(missing_ok=True)
        os.rmdir(tmpdir)
    return server
