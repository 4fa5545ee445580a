"""Processes of the e2e tier: started with their output in a log file, waited for until ready, stopped (TERM,
then KILL) or killed outright, and every live one remembered so that a failing test can print their logs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["Proc", "free_port", "live", "wait_until"]

#: Every process started and not yet reaped, oldest first (the failure report prints their logs).
live: list[Proc] = []


def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(what: str, check: Callable[[], object], timeout_s: float = 30.0, interval_s: float = 0.1,
               proc: Proc | None = None) -> object:
    """Poll ``check()`` until it returns something truthy (returned) or ``timeout_s`` passes (``TimeoutError``);
    exceptions count as not yet. With ``proc``, its early exit ends the wait with its log's tail."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        if proc is not None and proc.exited():
            raise RuntimeError(f"{proc.name} exited with status {proc.popen.returncode} while waiting for {what}:\n"
                               f"{proc.tail()}")
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # not ready yet
            last = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {type(last).__name__}: {last})" if last else ""
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s{detail}")
        time.sleep(interval_s)


class Proc:
    """One child process; its stdout and stderr go to ``log``."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            out.flush()
            # its own session: a signal to the test runner's group does not reach it, and kill() takes its children
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        live.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> bool:
        return self.popen.poll() is not None

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit status."""
        if not self.exited():
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.popen.wait(10)
        self._forget()
        return int(self.popen.returncode)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and state but runs no more (a stalled or partitioned replica)."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL at once (kill -9), the whole process group."""
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)
        self._forget()

    def _forget(self) -> None:
        with contextlib.suppress(ValueError):
            live.remove(self)
