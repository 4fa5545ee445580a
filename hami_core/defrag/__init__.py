"""The defragmenter: a planner of pod moves that free whole devices (:mod:`.planner`), its safety rules
(:mod:`.safety`) and the cluster's fragmentation (:mod:`.measure`)."""

from hami_core.defrag.planner import Budget, Move, Plan, plan_defrag

__all__ = ["Budget", "Move", "Plan", "plan_defrag"]
