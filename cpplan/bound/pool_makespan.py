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
``ceil(W / dp)`` on every group, the missing ones as padding waves of one overhead each: the waves and
their padding cost at least the rank average plus ``ceil(W / dp) · dp`` overheads, a second floor of the
summed share (the summed bound's crossing floor and partitions may count a wave beyond ``W`` that
would then need no padding, so they are not added to it). Every wave that holds requests also pays
what any wave pays beyond its overhead and rank average
(:attr:`~cpplan.bound.all_plans.PlanBound.wave_floor_s`, nonzero where all requests share a prefix; a
padding wave holds none), and a plan that runs waves on ``k`` groups has ``k`` waves or more
(:func:`used_groups_share_s`). For a few items, every
assignment of them to the groups is priced by the partition floors
(:func:`~cpplan.bound.partitions.pool_partition_bound_s`): a third floor.

Under dynamic CP (:func:`dynamic_pool_bound`) a wave of group size ``c`` holds ``c`` GPUs for its
price, and every GPU a plan uses is held by some wave for at least its overhead: the makespan is at
least the least overhead plus the work's GPU-seconds over the pool, and at least each wave's price.
For a few items, every partition of them into the runs split items tie together is priced, each run one
wave at some group size or split waves at any sizes (:func:`dynamic_runs_bound_s`): where every run is
one wave, by the busiest GPU of the best placement of their floors (:func:`whole_runs_bound_s`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from cpplan.bound.blocks import block_items
from cpplan.bound.node_floors import with_wave_counts
from cpplan.bound.partitions import (
    block_split_copies_s,
    enumerated_blocks,
    full_sharing_totals,
    item_subsets,
    partitions_marked_s,
    pool_partition_bound_s,
    set_floor_parts_s,
)
from cpplan.bound.unit_pieces import unit_pieces_bound_s
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.problem import Problem

ITEMS_TRIED = 16
"""The items (the largest by full-sharing packed tokens) whose own wave floor :func:`item_floor_s`
prices: the costliest item is almost always among them, and any item's floor is a valid bound."""

DYNAMIC_ENUMERATED_ITEMS = 4
"""The most items whose runs :func:`dynamic_runs_bound_s` enumerates: it prices every set of items at
every group size (about 0.35 s at five items and 1.5 s at eight on four GPUs, on a busy machine)."""

PIECES_MAX_POOL = 8
"""The most GPUs a dynamic-CP pool may have for :func:`~cpplan.bound.unit_pieces.unit_pieces_bound_s` to
search its blocks' placements (its search branches over the ways a block's pieces take GPUs)."""

ROUND_DOWN = 1e-9
"""Relative margin taken off the bound (as :data:`cpplan.bound.all_plans.ROUND_DOWN`)."""


def rounded_down(seconds: float) -> float:
    """``seconds`` to 9 decimals, never up: a term stated this way still bounds what it bounds, and
    sums of such terms (the pool bound reads the summed bound's) stay below their exact values."""
    return math.floor(seconds * 1e9) / 1e9


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
    largest = np.argsort(-problem.item_full_tokens, kind="stable")[:ITEMS_TRIED].tolist()
    costliest = max(item_floor_s(problem, i) for i in largest)
    share = used_groups_share_s(problem, summed)
    terms = {"summed_waves_over_groups": share, "costliest_item_wave": costliest}
    enumerated = pool_partition_bound_s(problem)
    if enumerated is not None and math.isfinite(enumerated):  # infinite: some item fits no wave
        terms["enumerated_groups"] = enumerated
    bound = max(share, max(v for k, v in terms.items() if k != "summed_waves_over_groups") * (1 - ROUND_DOWN))
    return dataclasses.replace(
        summed, bound_s=bound, terms_s={k: rounded_down(v) for k, v in terms.items()}, new_plans=()
    )


def used_groups_share_s(problem: Problem, summed) -> float:
    """What the busiest of the groups a plan uses runs at least, from ``summed`` (the bound of the
    waves' summed prices, :func:`~cpplan.bound.all_plans.waves_bound`: ``S``, its rank-average terms
    ``A``, valid whatever the waves, and ``e``, what each wave pays beyond its overhead and rank
    average, :attr:`~cpplan.bound.all_plans.PlanBound.wave_floor_s`). A plan that runs waves on
    ``k < dp`` groups has at least ``k`` waves, so they cost at least ``S_k = max(S, A + k ·
    (overhead + e))`` and the busiest of the ``k`` groups at least ``S_k / k``. One that runs waves on
    all ``dp`` groups has ``m = max(W, dp)`` waves or more (``W``: the summed bound's least number) and,
    where every group must run as many waves as the others, padding waves of one overhead each up to a
    multiple of ``dp``: at least ``max(S, A + P · overhead + m · e)`` over ``dp`` (``P``: ``m`` or its
    padded count). The least over ``k`` from 1 to ``dp``: where the summed bound counts fewer waves than
    groups, the ``1 / dp`` share lifted by the waves the other groups must run to be used at all."""
    average = _average_s(problem, summed)
    overhead, each = problem.card.wave_overhead_s, problem.card.wave_overhead_s + summed.wave_floor_s
    dp = problem.topology.dp
    shares = [max(summed.bound_s, (average + k * each) * (1 - ROUND_DOWN)) / k for k in range(1, dp)]
    waves = max(summed.num_waves, dp)
    padded = waves + (-waves % dp) if problem.topology.needs_equal_waves else waves
    every_group = average + padded * overhead + waves * summed.wave_floor_s
    shares.append(max(summed.bound_s, every_group * (1 - ROUND_DOWN)) / dp)
    return min(shares)


def _average_s(problem: Problem, summed) -> float:
    """The rank-average terms of ``summed`` (per barrier, summed): what any plan's waves cost at least
    beside their overheads, however many waves they are."""
    names = set(problem.card.barrier_names)
    return math.fsum(v for k, v in summed.terms_s.items() if k in names)


def dynamic_pool_bound(problem: Problem) -> tuple[float, dict[str, float]]:
    """The makespan bound of a pool under dynamic CP (see the module docstring) and its terms
    (``gpu_seconds_over_pool``, ``costliest_item_wave`` and, for a few items, ``enumerated_runs``),
    rounded toward a smaller bound."""
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
    gpu_seconds = overhead + float((barriers @ totals).sum()) / topology.pool
    largest = np.argsort(-problem.item_full_tokens, kind="stable")[:ITEMS_TRIED].tolist()
    costliest = max(min(item_floor_s(g, i) for g in groups) for i in largest)
    terms = {"gpu_seconds_over_pool": gpu_seconds, "costliest_item_wave": costliest}
    blocks = enumerated_blocks(problem, units=True)
    few = blocks is not None and len(blocks) <= DYNAMIC_ENUMERATED_ITEMS
    runs = dynamic_runs_bound_s(problem, groups, barriers) if few else 0.0
    if math.isfinite(runs) and runs > 0:  # infinite: some item fits no wave (nothing to bound)
        terms["enumerated_runs"] = runs
    if blocks is not None and topology.pool <= PIECES_MAX_POOL:
        terms["whole_blocks"] = unit_pieces_bound_s(problem, blocks, groups, barriers, gpu_seconds)
    bound = max(terms.values()) * (1 - ROUND_DOWN)
    return bound, {k: rounded_down(v * (1 - ROUND_DOWN)) for k, v in terms.items()}


def run_options_s(
    problem: Problem, groups: list[Problem], barriers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per set of items ``S`` (a bit mask) and per way to run
    exactly them under dynamic CP, the least seconds one GPU is held (``solo``) and the least
    GPU-seconds (``gpu``), shape ``(sets, ways)`` (at most :data:`~cpplan.bound.partitions.ENUMERATED_ITEMS`
    items). One wave on a group of ``c`` GPUs: its price, at
    least ``F_c(S)`` (:func:`~cpplan.bound.partitions.set_floor_parts_s` of the size's problem), held
    by ``c`` GPUs. Two waves or more, tied by an item split over them, at any sizes (they may run at
    once on different groups: ``solo`` 0): each wave's ``c`` times its price is at least its size's
    ``c`` times overhead plus, per barrier, the least coefficient over the sizes times its totals
    (``barriers``; remote tokens as none), and the waves' totals sum to at least the full-sharing
    totals of ``S`` and the split block's common nodes once more (``block_split_copies_s`` at
    ``barriers``)."""
    blocks = enumerated_blocks(problem, units=True)
    n = len(blocks)
    ones = [set_floor_parts_s(g, units=True)[0] for g in groups]
    solo = np.stack([*ones, np.zeros(1 << n)], axis=1)
    gpu = np.stack([g.topology.cp * one for g, one in zip(groups, ones, strict=True)], axis=1)
    overhead = min(g.topology.cp * g.card.wave_overhead_s for g in groups)
    summed = barriers.sum(axis=0)
    split = block_split_copies_s(problem, blocks, summed, groups)
    several = np.full(1 << n, math.inf)
    for mask in range(1, 1 << n):
        least = min(split[k] for k in range(n) if mask >> k & 1)
        if math.isfinite(least):
            requests = problem.item_requests(block_items(blocks, mask))
            totals = with_wave_counts(
                problem, requests, full_sharing_totals(problem, requests), remote_ranks=0
            )
            several[mask] = 2 * overhead + float((barriers @ totals).sum()) + least
    return solo, np.concatenate([gpu, several[:, None]], axis=1)


def dynamic_runs_bound_s(problem: Problem, groups: list[Problem], barriers: np.ndarray) -> float:
    """A floor of the makespan under dynamic CP over every plan of a few items: group a plan's waves into
    the runs split items tie together; each run holds exactly a set of items, in one of the ways of
    :func:`run_options_s`. Where every run is one wave, :func:`whole_runs_bound_s`; where some run is
    split, :func:`split_runs_bound_s`. The smaller of the two."""
    solo, gpu = run_options_s(problem, groups, barriers)
    sizes = [g.topology.cp for g in groups]
    pool = problem.topology.pool
    return min(whole_runs_bound_s(solo[:, :-1], sizes, pool), split_runs_bound_s(solo, gpu, pool))


def split_runs_bound_s(solo: np.ndarray, gpu: np.ndarray, pool: int) -> float:
    """The floor of the plans of :func:`run_options_s`'s items where some run is split (its last way):
    the pool's GPUs hold the waves' GPU-seconds one at a time, so the makespan is at least their sum
    over the pool, and at least every ``solo``: at least ``min_T max(T, D(T) / pool)`` with ``D(T)``
    the least summed ``gpu`` over the partitions of the items into sets, one of them split, each run a
    way whose ``solo`` is at most ``T`` (dynamic programming over item subsets; ``D`` falls as ``T``
    grows, so a binary search over the ``solo`` values finds the least). Infinite where no item may be
    split."""
    thresholds = np.unique(solo[np.isfinite(solo)])
    several = gpu[:, -1]
    if not np.isfinite(several).any():
        return math.inf

    def summed(limit: float) -> float:
        one = np.where(solo[:, :-1] <= limit, gpu[:, :-1], math.inf).min(axis=1)
        return partitions_marked_s(one, several)[-1] / pool

    lo, hi = 0, thresholds.size  # the first threshold at or above its own summed share
    while lo < hi:
        mid = (lo + hi) // 2
        if thresholds[mid] >= summed(float(thresholds[mid])):
            hi = mid
        else:
            lo = mid + 1
    below = summed(float(thresholds[lo - 1])) if lo > 0 else math.inf
    return min(below, float(thresholds[lo])) if lo < thresholds.size else below


def whole_runs_bound_s(solo: np.ndarray, sizes: Sequence[int], pool: int) -> float:
    """The floor of the plans where every run is one wave: per set of items (a bit mask) and group size,
    ``solo`` is the least price of the one wave holding exactly them, which holds that many of the
    pool's GPUs for its whole price. A GPU ends no sooner than the prices of the waves it holds add up
    to, so the makespan is at least the least, over the partitions of the items into sets, a size for
    each and the GPUs each wave holds (any of them, aligned blocks or not), of the busiest GPU's sum
    (a search over partitions, sizes and GPUs, GPUs of equal sums taken as one)."""
    full = solo.shape[0] - 1

    @functools.cache
    def least(left: int, loads: tuple[float, ...]) -> float:
        if left == 0:
            return loads[0]
        found = math.inf
        for sub in item_subsets(left):
            for k, size in enumerate(sizes):
                seconds = float(solo[sub, k])
                if not math.isfinite(seconds):
                    continue
                for held in _held_loads(loads, size, seconds):
                    if held[0] < found:
                        found = min(found, least(left ^ sub, held))
        return found

    return least(full, (0.0,) * pool)


def _held_loads(loads: tuple[float, ...], size: int, seconds: float):
    """Every way ``size`` GPUs of sums ``loads`` (descending) each add ``seconds``, up to GPUs of equal
    sums: the new sums, descending."""
    values = sorted(set(loads), reverse=True)
    counts = [loads.count(v) for v in values]
    for taken in _compositions(size, counts):
        new = []
        for value, count, take in zip(values, counts, taken, strict=True):
            new += [value + seconds] * take + [value] * (count - take)
        yield tuple(sorted(new, reverse=True))


def _compositions(total: int, limits: list[int]):
    """Every tuple of counts, each at most its limit, summing to ``total``."""
    if not limits:
        if total == 0:
            yield ()
        return
    for first in range(min(total, limits[0]) + 1):
        for rest in _compositions(total - first, limits[1:]):
            yield (first, *rest)


__all__ = [
    "DYNAMIC_ENUMERATED_ITEMS",
    "ITEMS_TRIED",
    "dynamic_pool_bound",
    "dynamic_runs_bound_s",
    "item_floor_s",
    "pool_bound",
    "run_options_s",
    "split_runs_bound_s",
    "whole_runs_bound_s",
]
