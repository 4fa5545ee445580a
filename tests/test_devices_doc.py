"""docs/devices.md lists every backend of every vendor package in this repository (generated, kept current)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from hami_core.devicesdoc import render_devices_page

ROOT = Path(__file__).resolve().parents[1]
VENDORS = {p.name.removeprefix("hami-") for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()}


def test_devices_page_is_current() -> None:
    installed = {ep.name for ep in importlib.metadata.entry_points(group="hami.devices")}
    if not installed >= VENDORS:
        pytest.skip(f"not every vendor package is installed (missing {sorted(VENDORS - installed)}); make test does")
    page = render_devices_page()
    assert (ROOT / "docs" / "devices.md").read_text(encoding="utf-8") == page, (
        "docs/devices.md is stale: run `python -m hami_core.devicesdoc > docs/devices.md`")
    for vendor in VENDORS:
        assert f"`hami-{vendor}`" in page
