"""verl's dynamic batch size: a token budget per GPU, Karmarkar-Karp balanced micro-batches.

From verl's description of ``use_dynamic_bsz``: the budget ``ppo_max_token_len_per_gpu`` is multiplied
by the sequence-parallel (Ulysses) size before splitting, the number of micro-batches is the smallest
that could hold the batch's total effective tokens under that budget, and the samples are then
partitioned into that many micro-batches by Karmarkar-Karp largest differencing on their lengths. No
micro-batch is checked against the budget afterwards, so a lumpy batch can overshoot it. Sequences are
packed without sharing (padding removed) and the packed micro-batch is split into CP contiguous
shards of equal tokens.

The per-GPU budget here is the card's one-GPU token capacity (see :mod:`.capacity`), so at CP1 the
budget is well tuned; under CP the multiplication ignores the gathered keys and values and the per
segment state that grow with the whole micro-batch.
"""

from __future__ import annotations

from cpplan.baselines.base import Baseline, build_plan, in_workload_order, item_tokens
from cpplan.baselines.binpack import karmarkar_karp
from cpplan.baselines.capacity import per_gpu_token_capacity
from cpplan.baselines.shard_rules import even_tokens
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem

NAME = "verl_dynamic_bsz"


def plan(problem: Problem) -> Plan:
    """Micro-batches of at most ``cp * per-GPU budget`` tokens on average, balanced by KK."""
    sizes = item_tokens(problem)
    budget = per_gpu_token_capacity(problem) * problem.topology.cp
    num_parts = min(len(sizes), max(1, -(-int(sizes.sum()) // budget)))
    waves = in_workload_order(karmarkar_karp(sizes.tolist(), num_parts))
    return build_plan(problem, NAME, waves, layout="none", ownership=even_tokens)


BASELINE = Baseline(
    name=NAME,
    origin="verl",
    summary="token budget x CP size, Karmarkar-Karp micro-batches, no sharing, even contiguous CP shards",
    plan=plan,
)
