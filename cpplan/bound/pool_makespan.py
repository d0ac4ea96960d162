"""A lower bound on a pool's makespan: ``dp`` CP groups of the same size, each running its waves one
after another, every wave on one group (``dp > 1`` at a fixed CP size).

The waves of any plan of the pool, taken together, are a plan of one group's problem (the same card,
budget and ranks per wave), so their summed prices are at least the bound of that plan
(:func:`~cpplan.bound.all_plans.waves_bound`); the busiest group runs at least a ``1 / dp`` share of
that sum. And the group running the wave that holds an item runs at least that wave: its overhead and,
per barrier, the average rank of the item's own totals (each of its nodes once, every flag of any of
its requests, a piece per distinct request end, every other rank's tokens remote): the costliest such
item is a floor too (:func:`item_floor_s`). The makespan is at least the larger of the two. Where
every GPU must run the same number of waves, a plan of at least ``W`` waves runs at least
``ceil(W / dp)`` on every group, the missing ones as padding waves of one overhead each: the summed
share counts ``(-W) mod dp`` of them too. For a few items, every assignment of them to the groups is
priced by the partition floors (:func:`~cpplan.bound.partitions.pool_partition_bound_s`): a third floor.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cpplan.bound.node_floors import with_wave_counts
from cpplan.bound.partitions import full_sharing_totals, pool_partition_bound_s
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.problem import Problem

ITEMS_TRIED = 16
"""The items (the largest by full-sharing packed tokens) whose own wave floor :func:`item_floor_s`
prices: the costliest item is almost always among them, and any item's floor is a valid bound."""

ROUND_DOWN = 1e-9
"""Relative margin taken off the bound (as :data:`cpplan.bound.all_plans.ROUND_DOWN`)."""


def item_floor_s(problem: Problem, item: int) -> float:
    """The least price of a wave holding ``item`` on ``cp`` ranks: the overhead and, per barrier, the
    average rank of the item's full-sharing totals (segments: its distinct request ends; remote
    tokens: ``(cp - 1)`` per packed token)."""
    cp = problem.topology.cp
    requests = problem.item_requests([item])
    layout = problem.pack_requests(requests, "full")
    totals = chunk_stats(layout, problem.chunk_tokens).amounts.sum(axis=0).astype(np.float64)
    totals = with_wave_counts(problem, requests, totals, remote_ranks=cp - 1)
    barriers = np.asarray(problem.card.constants.barrier_coefficients, dtype=np.float64)
    return problem.card.wave_overhead_s + float((barriers @ totals).sum()) / cp


def pool_bound(problem: Problem, summed):
    """The makespan bound of a pool of ``dp`` groups (see the module docstring) from ``summed``, the
    bound of the waves' summed prices (a :class:`~cpplan.bound.all_plans.PlanBound`); ``summed`` itself
    where it proves nothing."""
    if summed.bound_s is None:
        return summed
    dp = problem.topology.dp
    largest = np.argsort(-problem.item_full_tokens, kind="stable")[:ITEMS_TRIED].tolist()
    costliest = max(item_floor_s(problem, i) for i in largest)
    share = summed.bound_s / dp
    if problem.topology.needs_equal_waves:  # every group runs ceil(W / dp) waves or more, padded
        padding = -summed.num_waves % dp
        share += padding * problem.card.wave_overhead_s / dp
    terms = {"summed_waves_over_groups": share, "costliest_item_wave": costliest}
    enumerated = pool_partition_bound_s(problem)
    if enumerated is not None:
        terms["enumerated_groups"] = enumerated
    bound = max(share, max(v for k, v in terms.items() if k != "summed_waves_over_groups") * (1 - ROUND_DOWN))
    return dataclasses.replace(
        summed, bound_s=bound, terms_s={k: round(v, 9) for k, v in terms.items()}, new_plans=()
    )


def dynamic_pool_bound(problem: Problem) -> tuple[float, dict[str, float]]:
    """The makespan bound of a pool under dynamic CP (see the module docstring) and its terms
    (``gpu_seconds_over_pool``, ``costliest_item_wave``), rounded toward a smaller bound."""
    from cpplan.pricing.problem import group_problem

    topology = problem.topology
    sizes = topology.group_sizes()
    groups = [group_problem(problem, size) for size in sizes]
    barriers = np.min(
        [np.asarray(g.card.constants.barrier_coefficients, dtype=np.float64) for g in groups], axis=0
    )
    overhead = min(g.card.wave_overhead_s for g in groups)
    requests = np.arange(problem.tree.num_requests, dtype=np.int64)
    totals = with_wave_counts(problem, requests, full_sharing_totals(problem, requests), remote_ranks=0)
    gpu_seconds = (overhead + float((barriers @ totals).sum())) / topology.pool
    largest = np.argsort(-problem.item_full_tokens, kind="stable")[:ITEMS_TRIED].tolist()
    costliest = max(min(item_floor_s(g, i) for g in groups) for i in largest)
    terms = {"gpu_seconds_over_pool": gpu_seconds, "costliest_item_wave": costliest}
    terms = {k: round(v * (1 - ROUND_DOWN), 9) for k, v in terms.items()}
    return max(gpu_seconds, costliest) * (1 - ROUND_DOWN), terms


__all__ = ["ITEMS_TRIED", "dynamic_pool_bound", "item_floor_s", "pool_bound"]
