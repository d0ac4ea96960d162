"""A floor of a dynamic-CP pool's makespan from its blocks' indivisibility: the items, or the prefix units
they form (:mod:`cpplan.bound.blocks`), each held whole by one wave or split over several.

A wave of group size ``c`` costs at least its overhead and, per barrier, its average rank, which is a sum
over the nodes it holds: the nodes every request passes (at least one copy each) and, per block it
holds, the block's own nodes (those below the common prefix its requests pass, a piece per distinct
request end below it). So a wave holding the blocks ``S`` on ``c`` GPUs holds each of them for at least
``fixed_c + Σ_{u ∈ S} own_c(u)`` (:func:`block_loads_s`), and a GPU ends no sooner than the waves it
holds add up to. Where every block is whole in one wave, the busiest GPU holds at least ``min_c fixed_c``
(it runs a wave) plus the ``own`` of the blocks its waves hold: a block at size ``c`` is ``c`` pieces
of ``own_c(u)``, one on each of its GPUs, and the least busiest-GPU sum over every choice of sizes and
GPUs is found by a search over the blocks, largest first, GPUs of equal sums taken as one
(:func:`whole_blocks_floor_s`). Where some block is split over two waves or more, they store the nodes
all its requests pass once more, so the pool's GPU-seconds grow by that copy at least
(:func:`~cpplan.bound.partitions.block_split_copies_s`; none for a block no valid plan splits). The
makespan is at least the smaller of the two (:func:`unit_pieces_bound_s`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from itertools import combinations

import numpy as np

from cpplan.bound.blocks import Blocks
from cpplan.bound.node_floors import common_nodes, per_copy_amounts
from cpplan.bound.partitions import block_split_copies_s
from cpplan.pricing.layout import path_counts
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import QUANTITY_INDEX, REMOTE_COLUMNS, SEGMENT_COLUMNS

_TOKENS = QUANTITY_INDEX["tokens"]
_REMOTE_COLUMNS = list(REMOTE_COLUMNS)
_SEGMENT_COLUMNS = list(SEGMENT_COLUMNS)


def block_loads_s(
    problem: Problem, blocks: Blocks, groups: Sequence[Problem]
) -> tuple[np.ndarray, np.ndarray]:
    """Per group size (one per problem of ``groups``): ``fixed`` (shape ``(sizes,)``), the least any wave
    holds each of its GPUs for, its overhead and one copy of the nodes every request passes, and ``own``
    (shape ``(blocks, sizes)``), what holding a block adds on each of them: per barrier, the average
    rank of the block's nodes below that prefix and a piece per distinct request end there (every
    other rank's tokens remote). A node or end that ``k`` blocks reach (items sharing a prefix; never
    prefix units) counts ``1 / k`` to each, so the blocks of any wave add up to at most its own."""
    tree = problem.tree
    amounts = per_copy_amounts(problem).copy()
    amounts[:, _SEGMENT_COLUMNS] = 0.0  # pieces: the distinct ends below
    everyone = np.arange(tree.num_requests, dtype=np.int64)
    common = np.zeros(tree.num_nodes, dtype=bool)
    common[common_nodes(problem, everyone)] = True
    common[0] = True  # the root holds nothing
    reached = np.zeros((len(blocks), tree.num_nodes))
    ends = np.zeros((len(blocks), tree.num_nodes))
    for k, block in enumerate(blocks):
        requests = problem.item_requests(list(block))
        reached[k] = path_counts(tree, requests) > 0
        ends[k, tree.request_leaf[requests]] = 1.0
    reached[:, common], ends[:, common] = 0.0, 0.0
    own_totals = _shares(reached) @ amounts
    own_totals[:, _SEGMENT_COLUMNS] = _shares(ends).sum(axis=1)[:, None]
    totals = np.concatenate([amounts[common].sum(axis=0)[None, :], own_totals])  # (1 + blocks, quantities)
    fixed, own = [], []
    for group in groups:
        cp = group.topology.cp
        priced = totals.copy()
        priced[:, _REMOTE_COLUMNS] = (cp - 1) * priced[:, [_TOKENS]]
        barriers = np.asarray(group.card.constants.barrier_coefficients, dtype=np.float64).sum(axis=0)
        seconds = priced @ barriers / cp
        fixed.append(group.card.wave_overhead_s + float(seconds[0]))
        own.append(seconds[1:])
    return np.array(fixed), np.stack(own, axis=1)


def _shares(reached: np.ndarray) -> np.ndarray:
    """``reached`` (blocks by nodes, 0 or 1) with each node's column divided by the blocks reaching it."""
    return reached / np.maximum(reached.sum(axis=0), 1.0)[None, :]


def whole_blocks_floor_s(own: np.ndarray, sizes: Sequence[int], pool: int) -> float:
    """The least, over a size for each block and the GPUs each block's pieces take (``own[u, k]`` on each
    of ``sizes[k]`` distinct GPUs of ``pool``), of the busiest GPU's sum: a search over the blocks,
    largest first, GPUs of equal sums taken as one, cut where a branch cannot beat the best found (its
    busiest GPU, or its mean with every block left at its least GPU-seconds, is no lower)."""
    order = np.argsort(-own.min(axis=1), kind="stable").tolist()
    least_gpu_s = (own * np.asarray(sizes, dtype=np.float64)[None, :]).min(axis=1)[order]
    rest = np.concatenate([np.cumsum(least_gpu_s[::-1])[::-1], [0.0]]).tolist()
    best = [math.inf]

    @functools.cache
    def search(index: int, loads: tuple[float, ...]) -> None:
        if max(loads[0], (sum(loads) + rest[index]) / pool) >= best[0]:
            return  # the busiest GPU, or the mean with the blocks left at their least GPU-seconds
        if index == len(order):
            best[0] = loads[0]
            return
        block = order[index]
        for k, size in enumerate(sizes):
            if size > pool:
                continue
            for held in _spread(loads, size, float(own[block, k])):
                search(index + 1, held)

    search(0, (0.0,) * pool)
    return best[0]


def _spread(loads: tuple[float, ...], size: int, seconds: float):
    """Every way ``seconds`` lands on ``size`` distinct GPUs of sums ``loads`` (descending), GPUs of
    equal sums taken as one, least busiest first: the new sums, descending."""
    found = set()
    for chosen in combinations(range(len(loads)), size):
        new = list(loads)
        for g in chosen:
            new[g] += seconds
        found.add(tuple(sorted(new, reverse=True)))
    return sorted(found)


def unit_pieces_bound_s(
    problem: Problem, blocks: Blocks, groups: Sequence[Problem], barriers: np.ndarray, gpu_seconds_s: float
) -> float:
    """The makespan floor of the module docstring: the smaller of the whole-blocks floor and, where some
    block may be split, ``gpu_seconds_s`` (the pool's GPU-seconds floor over the pool, with the least
    overhead) plus the least split copy's GPU-seconds (at ``barriers``, per quantity the least
    coefficient over the group sizes, remote tokens as none) over the pool."""
    sizes = [group.topology.cp for group in groups]
    pool = problem.topology.pool
    fixed, own = block_loads_s(problem, blocks, groups)
    whole = float(fixed.min()) + whole_blocks_floor_s(own, sizes, pool)
    split = block_split_copies_s(problem, blocks, barriers.sum(axis=0), groups)
    return min(whole, gpu_seconds_s + min(split) / pool)
