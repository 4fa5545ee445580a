"""The HTML report in headless Chromium: what the terminal prints is on the page, no Python reprs, SVG charts, and
nothing overflows sideways at a phone's width. Skips when Chromium is absent (``e2e/sysdeps.sh chromium``)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hami_core.cli import main

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed; e2e/sysdeps.sh chromium "
                                                         "installs Debian's package (run as root)")
NARROW, WIDE = 360, 1400
#: Text a page must never show: Python's reprs of None, NaN, infinity, dicts, lists and objects, or a traceback.
REPRS = re.compile(r"\bNone\b|\bnan\b|\binf\b|\{'|\['|<\w+ object|Traceback")
#: A page that loads the report in a frame of a given width and writes the width its content needs into the DOM.
WRAPPER = """<!doctype html><html><body style="margin:0">
<iframe id="f" src="{src}" style="width:{width}px;height:900px;border:0"></iframe><pre id="measure">pending</pre>
<script>
document.getElementById("f").addEventListener("load", function () {{
  var d = this.contentDocument, w = this.contentWindow;
  document.getElementById("measure").textContent = d.documentElement.scrollWidth + " " + w.innerWidth;
}});
</script></body></html>"""


class _Page(HTMLParser):
    """The visible text (not style or script) and the attributes of every ``svg``."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.svgs: list[dict[str, str | None]] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("style", "script", "title"):
            self._skip += 1
        if tag == "svg":
            self.svgs.append(dict(attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script", "title"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def _chromium(profile: Path, *args: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                           "--allow-file-access-from-files", *args], capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout


def _simulate(folder: Path, name: str, *args: str) -> dict[str, str]:
    html, report = folder / f"{name}.html", folder / f"{name}.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", "--no-progress", "--jobs", "1", "--html", str(html), "--report", str(report),
                     *args]) == 0
    return {"html": str(html), "report": report.read_text(), "terminal": out.getvalue()}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    folder = tmp_path_factory.mktemp("html")
    nodes, pods = folder / "nodes.csv", folder / "pods.csv"  # a small openb-shaped trace for --bound
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},{16000 * (1 + i % 2)},65536,{1 + i % 4},{('T4', 'V100M16')[i % 2]}\n" for i in range(6)))
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
        f"p{i},{1000 * (1 + i % 5)},4096,{1 + (i % 7 == 0)},{1000 if i % 7 == 0 else 100 * (2 + i % 7)},"
        f"{'T4' if i % 5 == 0 else ''}\n" for i in range(30)))
    pages = {"seeds": _simulate(folder, "seeds", "--policy", "binpack,spread", "--seeds", "1-3", "--inflate", "1.0"),
             "single": _simulate(folder, "single")}
    pages["bound"] = _simulate(folder, "bound", "--trace-nodes", str(nodes), "--trace-pods", str(pods), "--policy",
                               "binpack,spread", "--seeds", "1-2", "--bound")
    return pages


def _dom(page: dict[str, str], tmp_path: Path) -> _Page:
    parsed = _Page()
    parsed.feed(_chromium(tmp_path / "profile", f"--window-size={WIDE},900", "--dump-dom",
                          Path(page["html"]).as_uri()))
    return parsed


def _summary_cells(terminal: str) -> list[list[str]]:
    """The first line of each row of the terminal's "Policies compared" table, cell by cell."""
    table = terminal[terminal.index("Policies compared"):]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        # 13: with --bound's ceiling, gap and ceiling for moves
        if len(cells) in (10, 13) and cells[0] and cells[0] != "policy":
            rows.append(cells)
    return rows


@pytest.mark.parametrize("name", ["seeds", "single", "bound"])
def test_the_page_says_what_the_terminal_says(pages: dict[str, dict[str, str]], name: str, tmp_path: Path) -> None:
    page = pages[name]
    dom = _dom(page, tmp_path)
    text = " ".join(" ".join(dom.text).split())
    rows = _summary_cells(page["terminal"])
    report = json.loads(page["report"])
    assert [r[0] for r in rows] == list(report["summary"])
    for cells in rows:
        for cell in cells:
            assert cell in text, f"terminal cell {cell!r} is not on the page"
    assert not REPRS.search(text), REPRS.search(text)
    assert len(dom.svgs) >= 3
    for svg in dom.svgs:  # scalable: a viewBox and no fixed size
        assert svg.get("viewbox") and "width" not in svg and "height" not in svg, svg
    if name == "bound":
        assert len(rows[0]) == 13  # the ceiling, the gap and the ceiling for moves
        for label, summary in report["summary"].items():
            assert f"{summary['moves_bound']:.2f}%" in text
            assert f"{label}: {summary['gap_to_bound']:.2f} points from the ceiling" in text.replace(" :", ":")
        assert "The ceiling" in text and "green: the ceiling at 100 % demand" in text
    elif name == "seeds":
        assert "line: mean over 3 seeds (1-3); band: lowest to highest seed" in text
        assert "median run of 3 seeds" in text
        assert "Failure reasons" in text and "GPU models" in text
    else:
        verdict = next(line.strip() for line in page["terminal"].splitlines() if "pods requesting devices" in line)
        assert verdict in text
        for placement in report["runs"][0]["placements"]:
            assert placement["pod"] in text
        for heading in ("Placements (arrival order, policy binpack/spread)", "Device usage per node"):
            assert heading in text


@pytest.mark.parametrize("name", ["seeds", "single", "bound"])
def test_nothing_overflows_at_a_phone_width_and_screenshots(pages: dict[str, dict[str, str]], name: str,
                                                             tmp_path: Path) -> None:
    html = Path(pages[name]["html"])
    for width in (NARROW, WIDE):
        wrapper = html.with_name(f"{name}-wrap-{width}.html")
        wrapper.write_text(WRAPPER.format(src=html.name, width=width))
        dom = _chromium(tmp_path / "profile", "--window-size=1500,1000", "--dump-dom", wrapper.as_uri())
        measured = re.search(r'<pre id="measure">(\d+) (\d+)</pre>', dom)
        assert measured, "the report did not load in the frame"
        needed, viewport = map(int, measured.groups())
        assert viewport == width and needed <= viewport, f"{width}px: the page needs {needed}px"
        shot = tmp_path / f"{name}-{width}.png"
        _chromium(tmp_path / "profile", f"--window-size={width},1200", f"--screenshot={shot}", html.as_uri())
        header = shot.read_bytes()[:24]
        assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (width, 1200)
