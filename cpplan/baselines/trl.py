"""TRL's ``bfd`` packing: best-fit-decreasing packing to a token capacity, without prefix sharing.

Samples are sorted by length, longest first, and each goes into the pack it leaves with the least room
(``max_length`` tokens), or a new pack. No prefix is shared. Under context parallelism the packed
sequence is split into CP contiguous shards of equal tokens.
"""

from __future__ import annotations

from cpplan.baselines.base import Baseline, build_plan, in_workload_order, item_tokens
from cpplan.baselines.binpack import best_fit_decreasing
from cpplan.baselines.capacity import token_capacity
from cpplan.baselines.shard_rules import even_tokens
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem

NAME = "trl_bfd"


def plan(problem: Problem) -> Plan:
    """Best-fit-decreasing waves to the card's token capacity at the problem's topology."""
    bins = best_fit_decreasing(item_tokens(problem).tolist(), token_capacity(problem))
    return build_plan(problem, NAME, in_workload_order(bins), layout="none", ownership=even_tokens)


BASELINE = Baseline(
    name=NAME,
    origin="TRL",
    summary="best-fit-decreasing to a token capacity, no sharing, even contiguous CP shards",
    plan=plan,
)
