"""``hami simulate --cluster FILE`` switches on the default device-config section of every vendor on the nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hami_core.cli import main
from hami_core.plugins.manager import get_plugin_manager

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: vendor example folder → the section its plugin reads
VENDORS = {"ascend": "vnpus", "hygon": "hygon", "metax": "metax", "mthreads": "mthreads", "kunlun": "kunlun",
           "iluvatar": "iluvatars", "awsneuron": "awsneuron", "enflame": "enflame"}


def _installed() -> set[str]:
    return {r.name for r in get_plugin_manager().reports if r.status == "loaded"}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _placed(report: dict) -> list[tuple[str, str | None, bool, dict[str, str]]]:
    """Pod, node, skipped and the allocation annotations (the timestamps left out: they differ between runs)."""
    return [(p["pod"], p["node"], p["skipped"],
             {k: v for k, v in p["annotations"].items() if k.endswith("-allocated")})
            for p in report["runs"][0]["placements"]]


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_vendor_example_needs_no_config(vendor: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each vendor's example places its pods on its devices without --config, as with its example config."""
    if vendor not in _installed():
        pytest.skip(f"plugin hami-{vendor} is not installed")
    folder = EXAMPLES / vendor
    files = ["--cluster", str(folder / "node.yaml"), "--workload", str(folder / "pods.yaml")]
    bare = _run(capsys, *files)
    assert bare["inputs"]["device_sections"] == [VENDORS[vendor]]
    placed = _placed(bare)
    assert placed and not any(skipped for _, _, skipped, _ in placed), "a pod was placed as 'no managed device'"
    assert any(annos for _, _, _, annos in placed)
    assert placed == _placed(_run(capsys, *files, "--config", str(folder / "device-config.yaml")))


def test_mixed_cluster_and_a_scheduler_only_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two vendors in one file both count; a --config without device sections keeps them (and adds NVIDIA, HAMi's
    default for such a file)."""
    if not {"ascend", "hygon"} <= _installed():
        pytest.skip("needs hami-ascend and hami-hygon")
    cluster, pods = tmp_path / "nodes.yaml", tmp_path / "pods.yaml"
    for out, name in ((cluster, "node.yaml"), (pods, "pods.yaml")):
        out.write_text("\n---\n".join((EXAMPLES / v / name).read_text() for v in ("ascend", "hygon")))
    report = _run(capsys, "--cluster", str(cluster), "--workload", str(pods))
    assert report["inputs"]["device_sections"] == ["hygon", "vnpus"]
    assert not any(skipped for _, _, skipped, _ in _placed(report))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"scheduler": {"nodeSchedulerPolicy": "spread"}}))
    report = _run(capsys, "--cluster", str(cluster), "--workload", str(pods), "--config", str(config))
    assert report["inputs"]["device_sections"] == ["hygon", "nvidia", "vnpus"]
    assert report["runs"][0]["node_policy"] == "spread"
    assert not any(skipped for _, _, skipped, _ in _placed(report))


def test_config_section_overrides_the_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A section in --config wins over the vendor's default: with Hygon's count resource renamed, the example pods
    no longer ask for Hygon devices."""
    if "hygon" not in _installed():
        pytest.skip("needs hami-hygon")
    files = ["--cluster", str(EXAMPLES / "hygon/node.yaml"), "--workload", str(EXAMPLES / "hygon/pods.yaml")]
    default = _run(capsys, *files)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hygon": {"resourceCountName": "hygon.com/dcunum-renamed"}}))
    renamed = _run(capsys, *files, "--config", str(config))
    assert renamed["inputs"]["device_sections"] == ["hygon"]
    # the pods ask for hygon.com/dcunum, which this config no longer reads: nothing is a Hygon request any more
    assert not any(s for _, _, s, _ in _placed(default))
    assert any(s for _, _, s, _ in _placed(renamed))


def test_a_plain_nvidia_cluster_keeps_nvidia(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reg = json.dumps([{"id": "GPU-x", "count": 2, "devmem": 1000, "devcore": 100, "type": "NVIDIA T4", "health": True}])
    path = tmp_path / "nodes.yaml"
    path.write_text(f"kind: Node\nmetadata:\n  name: n1\n  annotations:\n    hami.io/node-nvidia-register: '{reg}'\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {limits: "
                    "{nvidia.com/gpu: 1}}}]}\n")
    assert _run(capsys, "--cluster", str(path), "--workload", str(pods))["inputs"]["device_sections"] == ["nvidia"]
    # the bundled workload asks for every vendor's devices: their sections come on so those pods fail as in a
    # cluster (no such device here) instead of being placed as CPU pods
    report = _run(capsys, "--cluster", str(path))
    assert {"nvidia", "vnpus", "hygon"} <= set(report["inputs"]["device_sections"])
    ascend = [p for p in report["runs"][0]["placements"] if "910" in p["pod"] or "npu" in p["pod"]]
    assert ascend and all(p["node"] is None and not p["skipped"] for p in ascend)
