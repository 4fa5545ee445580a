"""Cluster and workload files and the flags that name them or an address: every bad one is one clean line naming
the flag or file, the document and the field, never a traceback (``--cluster-file`` of scheduler, monitor and
device plugin, ``hami simulate --cluster/--workload``, ``--http-bind``, ``--metrics-bind``, ``--port``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hami_core.cli import main
from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.errors import HamiError
from hami_core.scheduler.server import parse_bind
from hami_core.sim.loader import InputError, load_objects

NODE = "kind: Node\nmetadata: {name: n1}\n"
_LAUGHS = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10))

BAD_CLUSTER_FILES = [
    ("- a\n- b\n", "document 1: expected a Node or Pod or ResourceQuota object, got list"),
    ("just a string\n", "document 1: expected a Node or Pod or ResourceQuota object, got str"),
    ("kind: Node\nmetadata: 5\n", "document 1: Node: metadata must be an object, got int"),
    ("kind: List\nitems: 3\n", "document 1: items must be a list, got int"),
    ("kind: List\nitems: [7]\n", "document 1: expected a Node or Pod or ResourceQuota object, got int"),
    ("kind: Node\nmetadata: {name: [1]}\n", "metadata.name must be a string"),
    ("kind: Node\nmetadata: {name: n, annotations: 5}\n", "Node n: metadata.annotations must be an object"),
    ("kind: Node\nmetadata: {name: n, labels: {gpu: true}}\n", "Node n: metadata.labels.gpu must be a string"),
    ("kind: Node\nmetadata: {name: n}\nstatus: {capacity: [1]}\n", "Node n: status.capacity must be an object"),
    ("kind: Pod\nmetadata: {name: p}\nspec: 7\n", "Pod p: spec must be an object, got int"),
    ("metadata: {name: n}\n", "document 1: object has no kind"),
    (NODE + "---\n" + NODE.replace("n1", "n2") + "---\nkind: Pod\nmetadata: {name: p, name: q}\n",
     "line 8, column 21: duplicate key 'name' (first at line 8)"),
    (_LAUGHS + "kind: Node\nmetadata: {name: n, x: *l9}\n", "aliases expand to more than"),
    ("kind: Node\nmetadata: &m {name: n, labels: {a: *m}}\n", "self-reference"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CLUSTER_FILES)
def test_cluster_file_problems_name_the_document_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(HamiError) as info:
        MemoryCluster.from_file(path)
    assert str(path) in str(info.value) and message in str(info.value), info.value


@pytest.mark.parametrize(("command", "case"), [
    (["scheduler", "--http-bind", "127.0.0.1:0", "--metrics-bind", ""], 0),
    (["monitor", "--port", "0", "--containers-dir", "{tmp}"], 3),
    (["device-plugin", "--node-name", "n1", "--kubelet-dir", "{tmp}"], 11),
])
def test_cluster_file_flag_is_a_usage_error(tmp_path: Path, command: list[str], case: int) -> None:
    # In a child process with a deadline: a file the command wrongly accepts would have it serve forever.
    text, message = BAD_CLUSTER_FILES[case]
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = subprocess.run([sys.executable, "-m", "hami_core.cli", *argv, "--cluster-file", str(path)],
                          capture_output=True, text=True, timeout=120)
    err = proc.stderr
    assert proc.returncode == 2, err
    assert err.startswith("hami: error: --cluster-file: cluster file ") and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err


def test_cluster_file_ignores_other_kinds_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(NODE + "---\nkind: Deployment\nmetadata: {name: d}\nspec: [odd, but not ours]\n---\n"
                    "kind: List\nitems:\n- kind: Pod\n  metadata: {name: p, namespace: ns}\n  spec: {containers: []}\n")
    cluster = MemoryCluster.from_file(path)
    assert sorted(cluster.nodes) == ["n1"] and sorted(cluster.pods) == [("ns", "p")]


def test_a_large_file_reusing_a_template_through_merge_keys_loads(tmp_path: Path) -> None:
    # aliases within the budget: 3000 pods merging one 8-node template
    path = tmp_path / "cluster.yaml"
    items = "".join(f"- {{<<: *t, kind: Pod, metadata: {{name: p{i}, namespace: ns}}}}\n" for i in range(3000))
    path.write_text("kind: List\nx-tmpl: &t {spec: {containers: [{name: c, image: i, args: [a, b]}]}}\nitems:\n"
                    + items)
    cluster = MemoryCluster.from_file(path)
    assert len(cluster.pods) == 3000 and cluster.pods[("ns", "p7")]["spec"]["containers"][0]["args"] == ["a", "b"]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--http-bind", "127.0.0.1:99999", "port 99999 is out of range (0 to 65535)"),
    ("--http-bind", "127.0.0.1:http", "port must be a number"),
    ("--http-bind", "::1", "an IPv6 address goes in brackets"),
    ("--metrics-bind", ":70000", "port 70000 is out of range"),
    ("--resync", "0", "must be more than 0 seconds"),
    ("--resync", "inf", "must be a finite number"),
])
def test_scheduler_flag_values_are_usage_errors(capsys: pytest.CaptureFixture[str], flag: str, value: str,
                                                message: str) -> None:
    assert main(["scheduler", flag, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err and message in err and "Traceback" not in err, err


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--port", "99999", "port 99999 is out of range"),
    ("--port", "-1", "port -1 is out of range"),
    ("--port", "x", "is not a port number"),
    ("--interval", "0", "must be more than 0 seconds"),
    ("--interval", "-5", "must be a finite number of seconds, 0 or more"),
    ("--gc-after", "nan", "must be a finite number"),
])
def test_monitor_flag_values_are_usage_errors(capsys: pytest.CaptureFixture[str], flag: str, value: str,
                                              message: str) -> None:
    assert main(["monitor", flag, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err and message in err and "Traceback" not in err, err


@pytest.mark.parametrize(("text", "expected"), [
    (":9395", ("0.0.0.0", 9395)), ("127.0.0.1:9443", ("127.0.0.1", 9443)), ("[::1]:80", ("::1", 80)),
    ("localhost", ("localhost", 7)), ("[::]", ("::", 7)), ("0.0.0.0:0", ("0.0.0.0", 0)),
    ("0.0.0.0:65535", ("0.0.0.0", 65535)),
])
def test_parse_bind_accepts(text: str, expected: tuple[str, int]) -> None:
    assert parse_bind(text, 7) == expected


@pytest.mark.parametrize("text", ["h:65536", "h:99999", "h:-1", "h:", ":", "h:1e3", "[::1", "[]:80", "[::1]x",
                                  "fe80::1:80", "h:\u0663"])
def test_parse_bind_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid address"):
        parse_bind(text, 7)


@pytest.mark.parametrize(("text", "message"), [
    ("kind: Pod\nmetadata: {name: a}\nmetadata: {name: b}\n", "line 3, column 1: duplicate key 'metadata'"),
    (_LAUGHS + "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, args: *l9}]}\n",
     "aliases expand to more than"),
    ("kind: List\nitems: {a: 1}\n", "items must be a list, got dict"),
    ("kind: Pod\nmetadata: {name: p, annotations: {hami.io/gpu-scheduler-policy: -1}}\n",
     "metadata.annotations.hami.io/gpu-scheduler-policy must be a string, got int"),
])
def test_workload_file_problems(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        load_objects(text, source="workload.yaml", kind="Pod")
    assert str(info.value).startswith("workload.yaml: ") and message in str(info.value), info.value


def test_simulate_cluster_list_items_not_a_list_is_one_clean_error(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("kind: List\nitems: 3\n")  # was a TypeError traceback
    assert main(["simulate", "--cluster", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hami: error: ") and "items must be a list" in err and "Traceback" not in err
