"""``hami simulate --explain``: one pod of the workload explained at its arrival, on the engine the replay built, and
the explanation's node is where the replay put it."""

from __future__ import annotations

import json

import pytest
import yaml

from hami_core.cli import main
from hami_core.engine.config import load_config
from hami_core.engine.facade import Engine
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim.experiment import Experiment, Policy, sim_pods
from hami_core.sim.explain import explain_arrival
from hami_core.sim.loader import bundled, load_objects


@pytest.fixture(scope="module")
def experiment() -> Experiment:
    config = load_config(yaml.safe_load(bundled("device-config.yaml")))
    plugins = get_plugin_manager()
    nodes = load_objects(bundled("cluster.yaml"), source="cluster.yaml", kind="Node")
    pods = load_objects(bundled("workload.yaml"), source="workload.yaml", kind="Pod")
    for i, pod in enumerate(pods):
        pod.setdefault("metadata", {}).setdefault("uid", f"sim-{i:06d}")
    tasks = sim_pods(Engine(config, plugins=plugins), pods)
    policy = Policy("binpack/spread", "binpack", "spread")
    return Experiment(config, plugins, nodes, tasks, [policy], keep_placements=True)


def test_the_explanation_places_each_pod_where_the_replay_did(experiment: Experiment) -> None:
    [run] = experiment.run()
    placed = {p.pod: p for p in run.placements}
    checked = 0
    for task in experiment.tasks[:30]:
        name = task.pod["metadata"]["name"]
        try:
            explanation = explain_arrival(experiment, name)
        except HamiError:  # a pod without managed devices (a CPU-only one) has nothing to explain
            continue
        checked += 1
        assert explanation.node == placed[task.name].node, name
        for node in explanation.nodes:
            assert node.fits == (node.filter_fits), (name, node.name)
    assert checked >= 20


def test_cli_prints_the_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--no-progress", "--explain", "too-big", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["node"] is None and doc["fitting_nodes"] == 0
    assert doc["notes"][0].startswith("at its arrival: pod ")
    # more memory than any NVIDIA card has (and the bundled T4 node cordons one of its GPUs)
    failed_checks = {d["failed_check"] for n in doc["nodes"] for r in n["requests"] for d in r["devices"]}
    assert failed_checks == {"memory", "cordon"}
    assert main(["simulate", "--no-progress", "--explain", "train-llm-0"]) == 0
    out = capsys.readouterr().out
    assert "fits: the filter would choose node" in out


def test_cli_unknown_pod(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--no-progress", "--explain", "nope"]) == 1
    assert "hami: error: --explain nope: no such pod in the workload" in capsys.readouterr().err
