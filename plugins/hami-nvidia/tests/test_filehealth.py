"""The devices file as the fake GPUs' driver: ``health`` fields, re-read on change, bad files tolerated."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from hami_core.plugins.types import DeviceInfo
from hami_nvidia.filehealth import DevicesFileHealth, file_health

A, B = "GPU-aaaaaaaa-0000-4000-8000-000000000000", "GPU-bbbbbbbb-0000-4000-8000-000000000000"


def info(uuid: str, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=uuid, index=0, count=10, devmem=81920, devcore=100, type="NVIDIA A100", numa=0,
                      health=health)


def write(path: Path, text: str, bump: int = 0) -> None:
    path.write_text(text)
    st = path.stat()  # a distinct mtime even within one clock tick
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000))


def test_file_health_defaults_true_and_parses_go_booleans(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text(f"devices:\n  - {{uuid: {A}}}\n  - {{uuid: {B}, health: 'F'}}\n")
    assert file_health(f) == {A: True, B: False}


@pytest.mark.parametrize(("body", "message"), [
    ("devices:\n  - {uuid: X, health: maybe}\n", "device 0: health: expected true or false, got 'maybe'"),
    ("devices:\n  - {uuid: X, health: 3}\n", "device 0: health: expected true or false, got 3"),
    ("devices:\n  - {model: M}\n", "device 0 needs at least a uuid"),
    ("devices: 7\n", "expected a list under 'devices:'"),
])
def test_file_health_names_the_device_and_field(tmp_path: Path, body: str, message: str) -> None:
    f = tmp_path / "d.yaml"
    f.write_text(body)
    with pytest.raises(ValueError, match="devices file .*: " + message.replace("(", r"\(")):
        file_health(f)


def test_changes_are_reported_once_and_unknown_devices_ignored(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    write(f, f"- {{uuid: {A}}}\n- {{uuid: {B}}}\n")
    seen: list[tuple[str, bool]] = []
    watch = DevicesFileHealth(f, [info(A), info(B)], lambda u, ok: seen.append((u, ok)), poll_s=3600)
    watch.poll()
    assert seen == []
    write(f, f"- {{uuid: {A}, health: false}}\n- {{uuid: {B}}}\n- {{uuid: GPU-new, health: false}}\n", bump=1)
    watch.poll()
    watch.poll()  # unchanged file: not re-reported
    assert seen == [(A, False)]
    write(f, f"- {{uuid: {A}, health: true}}\n- {{uuid: {B}}}\n", bump=2)
    watch.poll()
    assert seen == [(A, False), (A, True)]


def test_a_device_listed_unhealthy_at_start_is_reported_by_start(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    write(f, f"- {{uuid: {A}, health: false}}\n")
    seen: list[tuple[str, bool]] = []
    watch = DevicesFileHealth(f, [info(A)], lambda u, ok: seen.append((u, ok)), poll_s=3600).start()
    try:
        assert seen == [(A, False)]
    finally:
        watch.stop()
    assert watch._thread is None


def test_a_broken_or_missing_file_keeps_health_and_logs_once(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "d.yaml"
    write(f, f"- {{uuid: {A}}}\n")
    seen: list[tuple[str, bool]] = []
    watch = DevicesFileHealth(f, [info(A)], lambda u, ok: seen.append((u, ok)), poll_s=3600)
    watch.poll()
    with caplog.at_level(logging.WARNING, "hami.nvidia.health"):
        write(f, "devices: [unclosed\n", bump=1)
        watch.poll()
        watch.poll()
        f.unlink()
        watch.poll()
    assert seen == []
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "device health unchanged until it can be read" in warnings[0]
    write(f, f"- {{uuid: {A}, health: false}}\n", bump=3)
    watch.poll()
    assert seen == [(A, False)]
