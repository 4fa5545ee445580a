"""hami-awsneuron runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import hami_awsneuron.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod
from hami_core.testing.conformance import ConformanceKit

CAPACITY = {"aws.amazon.com/neuron": 2, "aws.amazon.com/neuroncore": 4}
LABELS = {"node.kubernetes.io/instance-type": "inf2.24xlarge"}


class TestAWSNeuronConformance(DeviceBackendConformance):
    plugin, config = hami_awsneuron.plugin, {"awsneuron": {}}
    node_json = node("neuron-node", labels=LABELS, allocatable=CAPACITY)
    pod_json = pod(container(limits={"aws.amazon.com/neuroncore": 1}), name="neuroncore")
    malformed = (node("neuron-node", labels=LABELS, allocatable=CAPACITY,
                      capacity={**CAPACITY, "aws.amazon.com/neuron": "1.5"}),
                 "status.capacity[aws.amazon.com/neuron]")

    def test_scores_respect_policy_direction(self, conformance_kit: ConformanceKit) -> None:
        """Replaces the suite's check: HAMi gives a Neuron-only node a score of 0 under every node policy.

        ``ComputeDefaultScore`` returns 0 when the node's devices have no memory (Neuron devices register none)
        and ``ScoreNode`` is 0, so binpack and spread cannot tell a busy node from an idle one. Kept as HAMi does
        it (README, "Differences"); this asserts it, so a score that starts to depend on usage fails here.
        """
        kit = conformance_kit
        engine = kit.engine()
        busy, idle = kit.renamed_node("conformance-busy"), kit.renamed_node("conformance-idle")
        for node_json in (busy, idle):
            engine.upsert_node(node_json)
        occupant = kit.pod("occupant")
        engine.reserve(occupant, engine.schedule(occupant, ["conformance-busy"]))
        assert kit.usage(engine, "conformance-busy") != kit.usage(engine, "conformance-idle")
        for policy in ("binpack", "spread"):
            scores = dict(engine.schedule(kit.pod(f"probe-{policy}", node_policy=policy)).scores)
            assert scores == {"conformance-busy": 0.0, "conformance-idle": 0.0}, (policy, scores)
