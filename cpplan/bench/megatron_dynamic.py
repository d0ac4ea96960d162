"""Megatron-LM's dynamic (hybrid) context parallelism, from its published scheduler.

Megatron-LM's ``BalancedCPScheduler`` (``megatron/core/pipeline_parallel/hybrid_cp_schedule.py``; the
same scheduler is behind verl's and Megatron-Bridge's dynamic CP) takes a per-rank token cap,
``max_seqlen_per_dp_cp_rank``, as its only memory guard and gives every sample its own CP group over the
``dp * cp`` pool:

- **group size**: ``gpus_needed(L) = max(1, 2 ** ceil(log2(L / cap)))``, the smallest power of two that
  keeps ``L / size`` within the cap;
- **balancing**: samples in decreasing length; each goes to a new group of free GPUs while the round
  has some, else to the least-loaded group of its size, loads estimated as ``L ** 2 / size``; a round
  ends once the sizes have come down and the loads are within 5% (the rest go to the next round), or
  when no sample can be placed; GPUs a round leaves empty are filled by doubling the smallest groups;
- **execution**: every sample is its own forward and backward step on its group, sharded zigzag
  (``2 * size`` pieces), without prefix sharing.

Here a sample is an item (its requests packed without sharing), the cap is the one GPU's token
capacity read off the card (its best honest setting, as verl's budget is), and groups are aligned
blocks of the pool (Megatron's process groups for each power of two). cpplan prices every wave with its
evaluator and replays the schedule in round order; Megatron's barrier between rounds is not modelled,
which can only make its makespan look shorter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cpplan.baselines.base import Baseline, item_tokens
from cpplan.baselines.capacity import per_gpu_token_capacity
from cpplan.baselines.shard_rules import zigzag
from cpplan.planners.dynamic_cp import group_problem, pool_padding_s
from cpplan.plans.plan import Plan
from cpplan.plans.pool_schedule import block, timed
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, price_wave

NAME = "megatron_dynamic_cp"
BALANCE_SLACK = 0.05


def gpus_needed(length: int, cap: int, pool: int) -> int:
    """Megatron's group size for a sample of ``length`` tokens (at most the pool)."""
    return min(pool, max(1, 2 ** math.ceil(math.log2(length / cap))))


@dataclass
class _Group:
    """A CP group of one round: its aligned block, its samples and its estimated load."""

    size: int
    index: int
    samples: list[int] = field(default_factory=list)
    load: float = 0.0

    def ranks(self) -> set[int]:
        """The pool ranks the group holds."""
        return set(block(self.size, self.index))


def _free_block(groups: list[_Group], size: int, pool: int) -> int | None:
    """The lowest aligned block of ``size`` ranks no group of the round holds."""
    used = set().union(*(g.ranks() for g in groups)) if groups else set()
    return next((b for b in range(pool // size) if not used & set(block(size, b))), None)


def next_round(
    samples: list[tuple[int, int, int]], pool: int
) -> tuple[list[_Group], list[tuple[int, int, int]]]:
    """One round of the scheduler over ``(item, length, size)`` samples in decreasing length: its groups
    and the samples left for later rounds."""
    groups: list[_Group] = []
    left: list[tuple[int, int, int]] = []
    previous = None
    for position, (item, length, size) in enumerate(samples):
        free = _free_block(groups, size, pool)
        same = [g for g in groups if g.size == size]
        if free is not None:
            groups.append(_Group(size=size, index=free))
            target = groups[-1]
        elif same:
            target = min(same, key=lambda g: g.load)
        else:
            left.append((item, length, size))
            continue
        target.samples.append(item)
        target.load += length * length / size
        loads = [g.load for g in groups]
        balanced = max(loads) - min(loads) <= BALANCE_SLACK * max(loads)
        if previous is not None and size < previous and balanced and len(groups) > 1:
            return _filled(groups, pool), left + samples[position + 1 :]
        previous = size
    return _filled(groups, pool), left


def _filled(groups: list[_Group], pool: int) -> list[_Group]:
    """Double the smallest groups whose buddy block is empty until no GPU of the pool is idle."""
    while True:
        used = set().union(*(g.ranks() for g in groups))
        if len(used) == pool:
            return groups
        grown = False
        for g in sorted(groups, key=lambda g: g.size):
            buddy = set(block(g.size, g.index ^ 1))
            if g.size * 2 <= pool and not buddy & used:
                g.size, g.index = g.size * 2, g.index // 2
                grown = True
                break
        if not grown:
            return groups


def _wave(problem: Problem, item: int, size: int) -> WavePlan:
    """One sample alone at group ``size``: no sharing, zigzag ownership."""
    group = group_problem(problem, size)
    packed = group.pack([item], "none")
    owner = zigzag(packed, chunk_stats(packed, group.chunk_tokens), size)
    return price_wave(group, [item], packed, "none", owner)


def plan(problem: Problem) -> Plan:
    """Every item its own wave, group sizes from the token cap, rounds balanced as Megatron does."""
    pool = problem.topology.pool
    cap = per_gpu_token_capacity(problem)
    lengths = item_tokens(problem)
    order = np.argsort(-lengths, kind="stable").tolist()
    samples = [(i, int(lengths[i]), gpus_needed(int(lengths[i]), cap, pool)) for i in order]
    waves, gpus = [], []
    while samples:
        groups, samples = next_round(samples, pool)
        for g in groups:
            for item in g.samples:
                waves.append(_wave(problem, item, g.size))
                gpus.append(block(g.size, g.index))
    schedule = timed([w.cost_s for w in waves], gpus, pool, pool_padding_s(problem))
    return Plan(strategy=NAME, waves=tuple(waves), schedule=schedule)


BASELINE = Baseline(
    name=NAME,
    origin="Megatron-LM (also verl, Megatron-Bridge)",
    summary="per-rank token cap, power-of-two CP group per sample, balanced rounds over the DP x CP pool",
    plan=plan,
)
