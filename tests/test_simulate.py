"""`hami simulate`: the bundled demo and user-supplied YAML, through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami_core.cli import main


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_bundled_demo_places_what_fits(capsys: pytest.CaptureFixture[str]) -> None:
    report = _run_json(capsys)
    pods = {p["pod"]: p for p in report["pods"]}
    assert report["requested"] == 17 and report["placed"] == 14
    assert pods["default/web-frontend"]["skipped"]
    big = pods["research/too-big"]
    assert big["node"] is None
    assert big["failed"]["gpu-a100-0"] == "8/8 CardInsufficientMemory"
    assert big["failed"]["cpu-0"] == "node unregistered"
    assert "CardCordoned" in big["failed"]["gpu-t4-0"]
    llm = pods["research/train-llm-0"]
    assert llm["node"].startswith("gpu-a100")
    assert llm["annotations"]["hami.io/vgpu-devices-allocated"].count(",NVIDIA,40960,100:") == 4
    t4 = pods["media/t4-transcode"]
    assert t4["node"] == "gpu-t4-0"
    # every device's booked memory equals what the placed pods were given
    used = sum(d["usedmem"] for devs in report["nodes"].values() for d in devs)
    assert used > 0 and all(d["usedmem"] <= d["totalmem"] for devs in report["nodes"].values() for d in devs)


def test_table_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 0
    out = capsys.readouterr().out
    assert "Placements (arrival order)" in out and "Device usage per node" in out
    assert "14/17 pods requesting devices were placed" in out


def test_policy_flags_change_placements(capsys: pytest.CaptureFixture[str]) -> None:
    binpack = {p["pod"]: p["node"] for p in _run_json(capsys)["pods"]}
    spread = {p["pod"]: p["node"] for p in _run_json(capsys, "--node-policy", "spread")["pods"]}
    assert binpack != spread


def test_user_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reg = json.dumps([{"id": "GPU-x", "count": 2, "devmem": 1000, "devcore": 100, "type": "NVIDIA T4", "health": True}])
    (tmp_path / "nodes.yaml").write_text(
        "kind: List\nitems:\n- kind: Node\n  metadata:\n    name: n1\n    annotations:\n"
        f"      hami.io/node-nvidia-register: '{reg}'\n")
    (tmp_path / "pods.yaml").write_text("".join(
        f"---\nkind: Pod\nmetadata: {{name: p{i}}}\nspec:\n  containers:\n  - name: c\n    resources:\n"
        "      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 400}\n" for i in range(3)))
    report = _run_json(capsys, "--cluster", str(tmp_path / "nodes.yaml"), "--workload", str(tmp_path / "pods.yaml"))
    assert [p["node"] for p in report["pods"]] == ["n1", "n1", None]
    assert report["pods"][2]["failed"] == {"n1": "1/1 CardTimeSlicingExhausted"}


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read Node file"),
    ("kind: Pod\nmetadata: {name: x}\n", "expected kind Node"),
    ("kind: Node\nmetadata: {}\n", "Node has no metadata.name"),
    ("- just\n- a list\n", "expected a Node object"),
    ("{unclosed", "not valid YAML"),
])
def test_bad_input_is_one_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
                                      message: str) -> None:
    path = tmp_path / "nodes.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["simulate", "--cluster", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hami: error: ") and message in err and "Traceback" not in err


def test_bad_gpu_policy_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--gpu-policy", "fastest"]) == 1
    assert "gpuSchedulerPolicy" in capsys.readouterr().err
