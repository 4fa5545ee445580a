"""The containers directory (node spec §3.2): one ``<podUID>_<container>/`` per container, opened once, and the pods
they belong to.

:class:`ContainerStore` scans the directory, opens new cache files, drops vanished or shrunken ones, garbage-collects
the directories of pods that are gone, and skips an entry it cannot use with a log line: once per entry, again
only when the reason changes and at most once every ``log_every_s`` (a container that truncates and rewrites its
file in a loop changes the reason on every scan; the lines say how many problems they did not report).
Directory names are chosen inside the containers; one that is not UTF-8 cannot be a Prometheus label and is
skipped like any other bad entry.
:class:`PodIndex` maps pod UIDs to Pods from a :class:`~hami_core.cluster.base.Cluster` (``list_pods``, cached).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hami_core.monitor.region import RegionError, RegionFile

__all__ = ["ContainerEntry", "ContainerStore", "PodIndex", "printable", "split_dir_name"]

log = logging.getLogger("hami.monitor")

VGPU_NODE_LABEL = "hami.io/vgpu-node"
#: A bad entry is reported at most this often (seconds), however often its reason changes.
LOG_EVERY_S = 600.0


def printable(path: str) -> str:
    """``path`` for a log line: bytes that are not UTF-8 (``os.scandir`` keeps them as surrogates) as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the name's bytes are not UTF-8
        return False
    return True


def split_dir_name(name: str) -> tuple[str, str] | None:
    """``<podUID>_<container>`` split at the first ``_``; None unless both parts are non-empty."""
    uid, sep, container = name.partition("_")
    return (uid, container) if sep and uid and container else None


@dataclass
class ContainerEntry:
    name: str            # directory name
    pod_uid: str
    container: str
    dir: str
    region: RegionFile


class ContainerStore:
    """The loaded regions of ``root``; call :meth:`refresh` to pick up changes. Not thread-safe on its own."""

    def __init__(self, root: str | os.PathLike[str], *, gc_after_s: float = 300.0,
                 clock: Callable[[], float] = time.time, log_every_s: float = LOG_EVERY_S,
                 log_clock: Callable[[], float] = time.monotonic) -> None:
        self.root = os.fspath(root)
        self.gc_after_s = gc_after_s
        self.clock = clock
        self.log_every_s = log_every_s
        self.log_clock = log_clock
        self.entries: dict[str, ContainerEntry] = {}
        self._failed: dict[str, tuple[Any, str]] = {}   # dir name -> (file signature, last reason)
        self._reported: dict[str, tuple[float, int]] = {}  # dir name -> (when last logged, problems not logged)
        self._root_error: str | None = None

    def __iter__(self) -> Iterator[ContainerEntry]:
        return iter(list(self.entries.values()))

    def __len__(self) -> int:
        return len(self.entries)

    def close(self) -> None:
        for entry in self.entries.values():
            entry.region.close()
        self.entries.clear()

    # ------------------------------------------------------------------------------------------ logging
    def _report(self, name: str, level: int, message: str, *args: Any) -> None:
        """Log about entry ``name`` unless it was logged about less than ``log_every_s`` ago (then only count)."""
        now = self.log_clock()
        last = self._reported.get(name)
        if last is not None and now - last[0] < self.log_every_s:
            self._reported[name] = (last[0], last[1] + 1)
            log.debug(message, *args)
            return
        untold = last[1] if last is not None else 0
        self._reported[name] = (now, 0)
        suffix = f" ({untold} more change(s) not logged since the last line)" if untold else ""
        log.log(level, message + "%s", *args, suffix)

    def _fail(self, name: str, signature: Any, reason: str, level: int = logging.WARNING) -> None:
        previous = self._failed.get(name)
        self._failed[name] = (signature, reason)
        if previous is None or previous[1] != reason:
            self._report(name, level, "skipping %s: %s", printable(os.path.join(self.root, name)), reason)

    # ------------------------------------------------------------------------------------------ refresh
    def refresh(self, alive_uids: set[str] | None = None) -> None:
        """Rescan ``root``. With ``alive_uids`` (the pods known on this node), directories of other pods that
        were not modified for ``gc_after_s`` are closed and removed, as HAMi's monitor does."""
        try:
            with os.scandir(self.root) as it:
                dirs = {e.name: e for e in it if e.is_dir(follow_symlinks=False)}
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if self._root_error != reason:
                log.warning("cannot read containers dir %s: %s", self.root, reason)
            self._root_error = reason
            return
        self._root_error = None
        for name in list(self.entries):
            if name not in dirs:
                self.entries.pop(name).region.close()
        for known in (self._failed, self._reported):
            for name in [n for n in known if n not in dirs]:
                del known[name]
        now = self.clock()
        for name, dentry in dirs.items():
            parts = split_dir_name(name)
            if parts is None:
                self._fail(name, None, "directory name is not <podUID>_<container>", logging.DEBUG)
                continue
            if alive_uids is not None and parts[0] not in alive_uids and self._collect_garbage(name, dentry, now):
                continue
            if not is_utf8(name):
                self._fail(name, None, "directory name is not UTF-8 (it cannot be a metric label)")
                continue
            entry = self.entries.get(name)
            if entry is not None:
                if self._still_valid(entry):
                    continue
                self.entries.pop(name).region.close()
            self._load(name, dentry.path, *parts)

    def _collect_garbage(self, name: str, dentry: os.DirEntry[str], now: float) -> bool:
        try:
            mtime = dentry.stat(follow_symlinks=False).st_mtime
        except OSError:
            return False
        if now - mtime <= self.gc_after_s:
            return False  # grace period for a pod the API has not shown us yet
        entry = self.entries.pop(name, None)
        if entry is not None:
            entry.region.close()
        self._failed.pop(name, None)
        self._reported.pop(name, None)
        try:
            shutil.rmtree(dentry.path)
        except OSError as exc:
            log.warning("cannot remove %s of a deleted pod: %s", printable(dentry.path), exc.strerror or exc)
        else:
            log.info("removed %s: its pod is gone", printable(dentry.path))
        return True

    def _still_valid(self, entry: ContainerEntry) -> bool:
        region = entry.region
        try:
            st = os.stat(region.path)
        except OSError:
            self._fail(entry.name, None, "cache file disappeared")
            return False
        if st.st_ino != region.inode:
            log.debug("%s was replaced; reopening", printable(region.path))
            return False
        try:
            region.check()
        except RegionError as exc:
            signature = (os.path.basename(region.path), st.st_ino, st.st_size, st.st_mtime_ns)
            self._fail(entry.name, signature, exc.reason)
            return False
        return True

    def _load(self, name: str, path: str, pod_uid: str, container: str) -> None:
        try:
            files = os.listdir(path)
        except OSError as exc:
            self._fail(name, None, exc.strerror or str(exc))
            return
        caches = [f for f in files if "libvgpu.so" in f or f.endswith(".cache")]
        if len(caches) > 2:
            self._fail(name, tuple(sorted(caches)), f"cache num not matched ({len(caches)} files)")
            return
        candidates = sorted(f for f in caches if f.endswith(".cache") and "libvgpu.so" not in f)
        if not candidates:
            self._failed.pop(name, None)
            return  # not created yet: retried on the next refresh
        file = os.path.join(path, candidates[0])
        try:
            st = os.stat(file)
        except OSError as exc:
            self._fail(name, None, exc.strerror or str(exc))
            return
        signature = (candidates[0], st.st_ino, st.st_size, st.st_mtime_ns)
        previous = self._failed.get(name)
        if previous is not None and previous[0] == signature:
            return  # unchanged since it failed; already logged
        try:
            region = RegionFile(file)
        except RegionError as exc:
            self._fail(name, signature, exc.reason, logging.INFO if exc.retry else logging.WARNING)
            return
        except (OSError, ValueError) as exc:
            self._fail(name, signature, str(getattr(exc, "strerror", None) or exc))
            return
        if previous is not None:
            self._report(name, logging.INFO, "loaded %s (%s) after earlier failure", printable(file),
                         region.layout.name)
        self._failed.pop(name, None)
        self.entries[name] = ContainerEntry(name, pod_uid, container, path, region)


class PodIndex:
    """Pods by UID from a cluster, listed at most every ``resync_s`` (and again on an unknown UID, at most every
    ``miss_relist_s``). With ``node_name``, only pods on that node (``spec.nodeName``) or labelled
    ``hami.io/vgpu-node=<node>``."""

    def __init__(self, cluster: Any, node_name: str | None = None, *, resync_s: float = 30.0,
                 miss_relist_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.resync_s = resync_s
        self.miss_relist_s = miss_relist_s
        self.clock = clock
        self.by_uid: dict[str, dict[str, Any]] = {}
        self.synced = False
        self._listed_at: float | None = None
        self._error: str | None = None

    def _on_node(self, pod: dict[str, Any]) -> bool:
        if self.node_name is None:
            return True
        meta = pod.get("metadata") or {}
        return ((pod.get("spec") or {}).get("nodeName") == self.node_name
                or (meta.get("labels") or {}).get(VGPU_NODE_LABEL) == self.node_name)

    def refresh(self, *, force: bool = False) -> None:
        now = self.clock()
        if not force and self._listed_at is not None and now - self._listed_at < self.resync_s:
            return
        self._listed_at = now
        try:
            pods = self.cluster.list_pods()
        except Exception as exc:  # any API failure: keep the last view, say so once
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if reason != self._error:
                log.warning("cannot list pods: %s", reason)
            self._error = reason
            return
        self._error = None
        self.by_uid = {uid: p for p in pods if (uid := (p.get("metadata") or {}).get("uid")) and self._on_node(p)}
        self.synced = True

    def lookup(self, uid: str) -> dict[str, Any] | None:
        pod = self.by_uid.get(uid)
        if pod is None and self._listed_at is not None and self.clock() - self._listed_at >= self.miss_relist_s:
            self.refresh(force=True)
            pod = self.by_uid.get(uid)
        return pod

    def alive_uids(self) -> set[str] | None:
        """UIDs of the pods on this node, or None while the index has never listed successfully."""
        return set(self.by_uid) if self.synced else None
