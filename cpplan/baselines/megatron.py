"""Megatron-LM's zigzag context parallelism over packed sequences.

Packing is first-fit-decreasing to the token capacity without sharing (as :mod:`.axolotl`); the CP
ownership is Megatron's load-balanced split: each sequence cut into ``2 * cp`` pieces, rank ``r``
holding pieces ``r`` and ``2 * cp - 1 - r`` (see :func:`.ownership.zigzag` for the mapping onto
128-token chunks).
"""

from __future__ import annotations

from cpplan.baselines.base import Baseline, build_plan, in_workload_order, item_tokens
from cpplan.baselines.binpack import first_fit_decreasing
from cpplan.baselines.capacity import token_capacity
from cpplan.baselines.shard_rules import zigzag
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem

NAME = "megatron_zigzag"


def plan(problem: Problem) -> Plan:
    """First-fit-decreasing waves, zigzag chunk ownership per sequence."""
    bins = first_fit_decreasing(item_tokens(problem).tolist(), token_capacity(problem))
    return build_plan(problem, NAME, in_workload_order(bins), layout="none", ownership=zigzag)


BASELINE = Baseline(
    name=NAME,
    origin="Megatron-LM",
    summary="first-fit-decreasing to a token capacity, no sharing, zigzag CP ownership (2 x CP pieces)",
    plan=plan,
)
