"""What the two MetaX backends share: the vendor name, their common words, and where their node scores meet.

HAMi scores a node once per pod, so a pod holding MetaX GPU cards *and* MetaX sGPU devices on one node used to get
one answer from hami-metax, ``gpu + sgpu x (+/-10000)``, computed as a single sum. With one backend object per
common word the two parts would reach the engine as two answers, added to the node's total one after the other;
float addition is not associative, so that total could differ from today's in the last bit (and a tie could break
the other way). The GPU backend therefore answers alone for such a node (:func:`combined_score`) and the sGPU
backend stays silent there; every other node gets exactly one backend's answer, as before.
"""

from __future__ import annotations

from hami_core.plugins import GpuPolicy, NodeScore

VENDOR = "metax"
#: MetaX GPU (whole cards, G.1) and MetaX sGPU (shared cards, G.2): request ``Type``s and pod-devices keys.
GPU_WORD = "Metax-GPU"
SGPU_WORD = "Metax-SGPU"

#: hami-core's policy-neutral factor: the engine multiplies a ``NodeScore(neutral=True)`` by +10000 under binpack
#: and -10000 under spread (HAMi ``PolicyNeutralScore``). The engine keeps its copy to itself
#: (``hami_core.engine.cycle``, which vendors do not import); this is the only place hami-metax needs it, and
#: the test suite checks that the two agree.
NEUTRAL_SCORE_FACTOR = 10000.0


def combined_score(raw: float, neutral: float, policy: GpuPolicy) -> NodeScore:
    """One node's answer for a pod on both backends: the GPU's raw score plus the sGPU's policy-neutral one,
    signed by the node policy here, as the engine would sign it alone."""
    sign = -NEUTRAL_SCORE_FACTOR if policy.node == "spread" else NEUTRAL_SCORE_FACTOR
    return NodeScore(raw + neutral * sign)
