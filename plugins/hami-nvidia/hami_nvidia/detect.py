"""NVIDIA GPU discovery (spec node.md §2.3): NVML behind an isolated, time-limited probe, or a devices file.

Sources, first match wins:

1. ``HAMI_OVERRIDE_NVIDIA_DEVICES_FILE`` (``hami device-plugin --devices-file`` sets it): fake GPUs from
   YAML, for tests and demos with no GPU (like HAMi's mock device plugin)::

       devices:
         - {uuid: GPU-00000000-0000-0000-0000-000000000000, model: NVIDIA A100-SXM4-80GB, memory: 81920, numa: 0}

   (``index`` defaults to the position; a bare list works too).
2. NVML through ``pynvml`` (package ``nvidia-ml-py``), probed in a **child process** with a timeout: a
   broken driver can hang ``nvmlInit`` or crash the interpreter, and neither may take the plugin down.
   The child is started with ``spawn`` semantics (a fresh ``python -m hami_nvidia.detect``), not fork,
   because forking a process that already runs gRPC threads is unsafe. The result is cached.

With no driver, no ``pynvml`` or a probe failure the answer is ``[]`` (logged), never an exception.
:func:`probe_nvml` takes the ``pynvml`` module as an argument so tests inject a fake one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hami_core.plugins.yamlload import MAX_CONFIG_BYTES, YamlInputError, load_yaml, read_text

log = logging.getLogger("hami.nvidia.detect")

OVERRIDE_ENV = "HAMI_OVERRIDE_NVIDIA_DEVICES_FILE"
PROBE_TIMEOUT_S = 20.0
SYS_PCI = "/sys/bus/pci/devices"


@dataclass(frozen=True, slots=True)
class GiProfile:
    """One GPU-instance profile a GPU supports (NVML ``GetGpuInstanceProfileInfo`` and its placements)."""

    nvml_index: int  # the NVML_GPU_INSTANCE_PROFILE_* value asked for
    profile_id: int
    slice_count: int
    instance_count: int
    multiprocessor_count: int
    memory_mb: int
    placements: tuple[tuple[int, int], ...] = ()  # (start, size)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as discovered."""

    uuid: str
    index: int
    model: str
    memory_mib: int
    numa: int = 0
    minor: int = -1
    mig_enabled: bool = False
    #: Only filled when discovery was asked for MIG profiles (dynamic MIG mode).
    mig_profiles: tuple[GiProfile, ...] = ()

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Gpu:
        profiles = tuple(GiProfile(**{**p, "placements": tuple(tuple(x) for x in p.get("placements", ()))})
                         for p in item.get("mig_profiles") or ())
        return cls(**{**item, "mig_profiles": profiles})


def model_name(name: str) -> str:
    """HAMi's ``type``: ``NVIDIA-`` is prefixed unless the NVML name already starts with ``NVIDIA``."""
    return name if name.startswith("NVIDIA") else f"NVIDIA-{name}"


def devices_file_items(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The device entries of a devices file (``devices:`` list or a bare list), each a mapping with a ``uuid``;
    raises ``ValueError`` naming the file and the device."""
    try:
        data = load_yaml(read_text(path, "devices file", max_bytes=MAX_CONFIG_BYTES), f"devices file {path}")
    except YamlInputError as exc:
        raise ValueError(str(exc)) from None
    items = data.get("devices") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError(f"devices file {path}: expected a list under 'devices:'")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not item.get("uuid"):
            raise ValueError(f"devices file {path}: device {i} needs at least a uuid")
    return items


def load_devices_file(path: str | os.PathLike[str]) -> list[Gpu]:
    """Fake GPUs from YAML (``devices:`` list or a bare list); raises ``ValueError`` naming the problem."""
    gpus = []
    for i, item in enumerate(devices_file_items(path)):
        try:
            gpus.append(Gpu(uuid=str(item["uuid"]), index=int(item.get("index", i)),
                            model=model_name(str(item.get("model", "NVIDIA-Fake"))),
                            memory_mib=int(item.get("memory", 0)), numa=int(item.get("numa", 0)),
                            minor=int(item.get("minor", -1)), mig_enabled=bool(item.get("mig", False))))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"devices file {path}: device {i}: {exc}") from None
    return gpus


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def numa_node(bus_id: str, sys_pci: str = SYS_PCI) -> int:
    """NUMA node of a PCI bus id (``0000`` domain prefix stripped as HAMi does); negative or error → 0."""
    bus = bus_id.lower()
    if bus.startswith("0000") and len(bus) > 12:
        bus = bus[4:]
    for candidate in (bus, f"0000{bus}" if not bus.startswith("0000") else bus):
        try:
            value = int(Path(sys_pci, candidate, "numa_node").read_text().strip())
        except (OSError, ValueError):
            continue
        return max(value, 0)
    return 0


def gi_profiles(nvml: Any, handle: Any) -> tuple[GiProfile, ...]:
    """Every GPU-instance profile the GPU supports, with its possible placements (empty for a non-MIG GPU)."""
    import ctypes

    error = getattr(nvml, "NVMLError", Exception)
    out = []
    for index in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10))):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except error:
            continue  # NOT_SUPPORTED: this GPU has no such profile (or no MIG at all)
        placements: tuple[tuple[int, int], ...] = ()
        try:
            # NVML's two-call protocol: a NULL array asks for the count, then the array is filled.
            count = ctypes.c_uint(0)
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, None, ctypes.byref(count))
            array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(count))
            placements = tuple((int(array[k].start), int(array[k].size)) for k in range(count.value))
        except error as exc:
            log.warning("GPU-instance profile %d: placements unavailable: %s", index, exc)
        out.append(GiProfile(nvml_index=index, profile_id=int(info.id), slice_count=int(info.sliceCount),
                             instance_count=int(info.instanceCount),
                             multiprocessor_count=int(info.multiprocessorCount),
                             memory_mb=int(info.memorySizeMB), placements=placements))
    return tuple(out)


def probe_nvml(nvml: Any, *, pre_configured_memory_mib: int = 0, sys_pci: str = SYS_PCI,
               mig_profiles: bool = False) -> list[Gpu]:
    """Enumerate GPUs through a ``pynvml``-like module. Per-device attribute errors degrade, not fail.

    ``GetMemoryInfo`` NOT_SUPPORTED (unified-memory GPUs, newer 570+ drivers) falls back to
    ``pre_configured_memory_mib``; a failing MIG-mode, minor-number or PCI query leaves the default.
    ``mig_profiles`` also reads each GPU's GPU-instance profiles (dynamic MIG registration).
    """
    error = getattr(nvml, "NVMLError", Exception)
    nvml.nvmlInit()
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            try:
                index = int(nvml.nvmlDeviceGetIndex(handle))
            except error:
                index = i
            try:
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
            except error as exc:
                log.warning("GPU %s: memory info unavailable (%s); using preConfiguredDeviceMemory=%d",
                            uuid, exc, pre_configured_memory_mib)
                memory = pre_configured_memory_mib
            try:
                numa = numa_node(_text(nvml.nvmlDeviceGetPciInfo(handle).busId), sys_pci)
            except error:
                numa = 0
            try:
                minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
            except error:
                minor = -1
            try:
                mig = bool(nvml.nvmlDeviceGetMigMode(handle)[0])
            except (error, TypeError, IndexError):
                mig = False
            gpus.append(Gpu(uuid=uuid, index=index, model=model_name(_text(nvml.nvmlDeviceGetName(handle))),
                            memory_mib=memory, numa=numa, minor=minor, mig_enabled=mig,
                            mig_profiles=gi_profiles(nvml, handle) if mig_profiles else ()))
        return gpus
    finally:
        with contextlib.suppress(error):
            nvml.nvmlShutdown()


def _probe_subprocess(timeout_s: float, pre_configured_memory_mib: int, mig_profiles: bool = False) -> list[Gpu]:
    cmd = [sys.executable, "-m", "hami_nvidia.detect", "--json", f"--pre-configured-memory={pre_configured_memory_mib}"]
    if mig_profiles:
        cmd.append("--mig-profiles")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        log.error("NVML probe timed out after %.0f s; no GPUs advertised", timeout_s)
        return []
    except OSError as exc:
        log.error("cannot start the NVML probe: %s", exc)
        return []
    if proc.returncode != 0:
        log.warning("NVML probe failed (exit %d): %s", proc.returncode, proc.stderr.strip()[-500:])
        return []
    try:
        return [Gpu.from_json(item) for item in json.loads(proc.stdout)]
    except (ValueError, TypeError) as exc:
        log.error("NVML probe answered garbage: %s", exc)
        return []


_cache: dict[tuple[Any, ...], list[Gpu]] = {}


def discover(*, devices_file: str | None = None, timeout_s: float = PROBE_TIMEOUT_S,
             pre_configured_memory_mib: int = 0, refresh: bool = False, mig_profiles: bool = False) -> list[Gpu]:
    """The node's GPUs: ``devices_file``, else ``$HAMI_OVERRIDE_NVIDIA_DEVICES_FILE``, else the NVML probe
    (with each GPU's GPU-instance profiles when ``mig_profiles``; a devices file has none)."""
    path = devices_file or os.environ.get(OVERRIDE_ENV)
    if path:
        return load_devices_file(path)
    key = (timeout_s, pre_configured_memory_mib, mig_profiles)
    if refresh or key not in _cache:
        _cache[key] = _probe_subprocess(timeout_s, pre_configured_memory_mib, mig_profiles)
    return list(_cache[key])


def _main(argv: list[str]) -> int:
    pre = 0
    for arg in argv:
        if arg.startswith("--pre-configured-memory="):
            pre = int(arg.split("=", 1)[1])
    try:
        import pynvml
    except ImportError:
        print("pynvml (nvidia-ml-py) is not installed", file=sys.stderr)
        return 3
    try:
        gpus = probe_nvml(pynvml, pre_configured_memory_mib=pre, mig_profiles="--mig-profiles" in argv)
    except Exception as exc:  # the child reports and exits; the parent decides
        print(f"NVML error: {exc}", file=sys.stderr)
        return 4
    if "--json" in argv:
        print(json.dumps([asdict(g) for g in gpus]))
    else:
        for g in gpus:
            print(f"{g.index}: {g.uuid} {g.model} {g.memory_mib} MiB numa={g.numa} minor={g.minor} mig={g.mig_enabled}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
