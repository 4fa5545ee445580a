"""One version: hami_core.__version__ is what pyproject.toml, `hami --version`, the chart, the image tag, deploy/ and
the changelog say."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

import hami_core
from hami_core import cli

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hami_core.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?(a|b|rc|dev)\d+)?", hami_core.__version__), hami_core.__version__


def test_hami_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0   # main turns argparse's exit into its status
    flag = capsys.readouterr().out
    assert cli.main(["version"]) == 0
    assert flag == capsys.readouterr().out == f"hami-core {hami_core.__version__}\n"


def test_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "hami-py" / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == hami_core.__version__, "run `make chart-version`"
    assert chart["version"] == hami_core.__version__, "run `make chart-version`"


def test_deploy_images_carry_the_version() -> None:
    text = (ROOT / "deploy" / "hami-py.yaml").read_text(encoding="utf-8")
    tags = set(re.findall(r"image: hami-py:(\S+)", text))
    assert tags == {hami_core.__version__}, "run `make manifests`"


def test_changelog_has_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(hami_core.__version__)}\]", text, re.M), "CHANGELOG.md has no section for it"
    assert "## [Unreleased]" in text


def test_makefile_image_tag_follows_the_version() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed")
    out = subprocess.run([make, "-s", "-C", str(ROOT), "version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == hami_core.__version__, out.stderr
    assert re.search(r"^IMAGE\s*\?=\s*hami-py:\$\(VERSION\)$", (ROOT / "Makefile").read_text(), re.M)
