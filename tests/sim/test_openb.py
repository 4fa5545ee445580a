"""The openb CSV format and its mapping to HAMi resources (traces/openb/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami_core.engine.facade import Engine
from hami_core.sim import openb
from hami_core.sim.loader import InputError
from hami_core.sim.openb import RowError, Task, TraceNode

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_node_mapping(tmp_path: Path) -> None:
    (node,) = openb.load_nodes(_write(tmp_path, "n.csv", NODES + "openb-node-0001,64000,262144,2,V100M32\n"))
    assert node == TraceNode("openb-node-0001", 64000, 262144, 2, "V100M32")
    obj = openb.node_object(node, split_count=7)
    assert obj["status"]["allocatable"] == {"cpu": "64000m", "memory": "262144Mi", "nvidia.com/gpu": "14"}
    devices = json.loads(obj["metadata"]["annotations"]["hami.io/node-nvidia-register"])
    assert [(d["id"], d["count"], d["devmem"], d["devcore"], d["type"]) for d in devices] == [
        ("GPU-openb-node-0001-0", 7, 32768, 100, "NVIDIA-V100M32"),
        ("GPU-openb-node-0001-1", 7, 32768, 100, "NVIDIA-V100M32")]


def test_task_mapping_through_admission_and_requests() -> None:
    engine = Engine()
    shared = openb.pod_object(Task("t-share", 6000, 12288, 1, 460, "V100M16|V100M32"))
    limits = shared["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "46", "nvidia.com/gpumem-percentage": "46"}
    assert shared["metadata"]["annotations"] == {"nvidia.com/use-gputype": "V100M16,V100M32"}
    assert shared["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "6000m", "memory": "12288Mi"}
    (req,) = engine.requests(engine.admit(shared)).containers[0].values()
    assert (req.nums, req.coresreq, req.mem_percentage, req.memreq) == (1, 46, 46, 0)

    whole = engine.admit(openb.pod_object(Task("t-whole", 12000, 16384, 4, 1000)))
    (req,) = engine.requests(whole).containers[0].values()
    assert (req.nums, req.coresreq, req.mem_percentage) == (4, 100, 100)  # admission made it exclusive

    cpu = openb.pod_object(Task("t-cpu", 2000, 4096, 0, 0))
    assert "limits" not in cpu["spec"]["containers"][0]["resources"]
    assert engine.requests(cpu).empty


def test_task_demand() -> None:
    assert Task("a", 1, 1, 1, 460).gpu_demand == 460
    assert Task("b", 1, 1, 8, 1000).gpu_demand == 8000
    assert Task("c", 1, 1, 0, 0).gpu_demand == 0


def test_optional_gpu_spec_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0000,12000,16384,1,1000\n")
    assert openb.load_tasks(path) == [Task("openb-pod-0000", 12000, 16384, 1, 1000, "")]


@pytest.mark.parametrize(("row", "message"), [
    ("p1,abc,1,1,500,,LS,Running,0,0,0", ":2: field 'cpu_milli' must be an integer, got 'abc'"),
    ("p1,100,1,1,1500,,LS,Running,0,0,0", ":2: field 'gpu_milli' must be in 1..1000"),
    ("p1,100,1,2,500,,LS,Running,0,0,0", ":2: field 'gpu_milli' must be 1000 for a 2-GPU task"),
    ("p1,100,1,1,455,,LS,Running,0,0,0", "must be a multiple of 10"),
    ("p1,100,1,-1,500,,LS,Running,0,0,0", "field 'num_gpu' must be >= 0"),
    (",100,1,1,500,,LS,Running,0,0,0", "field 'name' is empty"),
])
def test_bad_rows_name_file_line_and_field(tmp_path: Path, row: str, message: str) -> None:
    path = _write(tmp_path, "p.csv", PODS + row + "\nok,100,1,1,500,,LS,Running,0,0,0\n")
    with pytest.raises(RowError, match=message) as info:
        openb.load_tasks(path, strict=True)
    assert str(path) in str(info.value)
    skipped: list[str] = []
    assert [t.name for t in openb.load_tasks(path, skipped=skipped)] == ["ok"]
    assert len(skipped) == 1 and message.split(": ", 1)[-1][:20] in skipped[0]


def test_missing_columns_and_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing column"):
        openb.load_nodes(_write(tmp_path, "n.csv", "sn,gpu\nx,1\n"))
    with pytest.raises(InputError, match="cannot read trace file"):
        openb.load_tasks(tmp_path / "absent.csv")
    with pytest.raises(RowError, match="field 'model' is empty"):
        openb.load_nodes(_write(tmp_path, "m.csv", NODES + "n1,1000,1024,2,\n"), strict=True)
