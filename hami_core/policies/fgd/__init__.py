"""The ``fgd`` scheduling policy: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23), one package.

Registered as the built-in plugin ``hami.default.fgd``; it reaches the engine only through generic extension
points (:mod:`.plugin`): its own ``scheduler.fgd`` section, observing each pod, ordering a node's devices, and a
node score. Inside:

* :mod:`.config`: ``scheduler.fgd`` (the mix's window, tolerance, coverage, score steps, tie-break, a fixed mix);
* :mod:`.mix`: the request mix, learned online or fixed (:class:`~.mix.WorkloadModel`, :class:`~.mix.Workload`);
* :mod:`.fragmentation`: the fragmentation measure and its growth under a placement, numpy over nodes and devices;
* :mod:`.rowstore` and :mod:`.growth`: the per-node arrays and per-request-signature growth caches;
* :mod:`.score`: the node score (growth steps and tie-breaks); :mod:`.plugin`: the hooks.

The simulator's fragmentation metric (:mod:`hami_core.sim.fragmentation`) is the paper's definition on its own
inputs; ``tests/sim/test_fgd_measure.py`` holds it equal to :func:`.fragmentation.fragmentation`.
"""

from hami_core.policies.fgd.config import FgdConfig
from hami_core.policies.fgd.plugin import (
    NAME,
    engine_state,
    hami_observe_pod,
    hami_order_devices,
    hami_policy_setup,
    hami_prescore_nodes,
    hami_scheduling_policies,
    hami_score_defaults,
)

#: The scheduler sections this package owns (mounted on ``SchedulerConfig`` by :mod:`hami_core.policies`).
SCHEDULER_SECTIONS = {NAME: FgdConfig}
#: The GPU policy tokens this package adds, each with the HAMi device order it starts from (its
#: ``hami_order_devices`` then refines it).
GPU_POLICIES = {NAME: "binpack"}
#: Scorer name (``scheduler.scoreWeights.fgd``).
HAMI_SCORER = NAME

__all__ = ["GPU_POLICIES", "HAMI_SCORER", "NAME", "SCHEDULER_SECTIONS", "engine_state", "hami_observe_pod",
           "hami_order_devices", "hami_policy_setup", "hami_prescore_nodes", "hami_scheduling_policies",
           "hami_score_defaults"]
