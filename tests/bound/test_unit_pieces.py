"""The dynamic-CP pool floor from its blocks' indivisibility (:mod:`cpplan.bound.unit_pieces`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cpplan import Topology
from cpplan.api import build_problem
from cpplan.bound import plan_bound
from cpplan.bound.blocks import prefix_units
from cpplan.bound.node_floors import with_wave_counts
from cpplan.bound.partitions import full_sharing_totals
from cpplan.bound.unit_pieces import block_loads_s, unit_pieces_bound_s, whole_blocks_floor_s
from cpplan.planners.portfolio import solve
from cpplan.pricing.problem import group_problem
from cpplan.spec.profile import load_solver
from tests.support.grpo_arrivals import rollouts

MODEL = "qwen3.6-35b-a3b"


def _brute_force(own: np.ndarray, sizes: list[int], pool: int) -> float:
    """The least busiest-GPU sum over every size and GPU set of every block, by enumeration."""
    choices = [
        (k, gpus) for k, size in enumerate(sizes) for gpus in itertools.combinations(range(pool), size)
    ]
    best = np.inf
    for picked in itertools.product(choices, repeat=own.shape[0]):
        loads = np.zeros(pool)
        for block, (k, gpus) in enumerate(picked):
            loads[list(gpus)] += own[block, k]
        best = min(best, loads.max())
    return float(best)


@pytest.mark.parametrize("seed", range(6))
def test_whole_blocks_search_finds_the_least_busiest_gpu(seed):
    """On random blocks (five, sizes 1 and 2, three GPUs) the search's floor equals the enumerated
    least busiest-GPU sum: its cuts never drop the best placement."""
    rng = np.random.default_rng(seed)
    alone = rng.uniform(0.2, 1.0, 5)
    own = np.stack([alone, alone * rng.uniform(0.5, 0.7, 5)], axis=1)  # halved, plus a hand-off's worth
    assert whole_blocks_floor_s(own, [1, 2], 3) == pytest.approx(_brute_force(own, [1, 2], 3), rel=1e-12)


def _dynamic(workload):
    return build_problem(
        workload, topology=Topology.parse("dp=2,cp=2,dynamic_cp=1"), model=MODEL, memory_bytes="40GiB"
    )


def test_block_loads_add_up_to_one_wave_of_everything():
    """A wave holding every block at size ``c`` holds each GPU for at least its ``fixed`` plus every
    block's ``own``: at most its overhead and full-sharing average rank (flags some requests lack are
    left out), and within 1% of it."""
    problem = _dynamic(rollouts(3, 4, seed=6))
    blocks = prefix_units(problem)
    groups = [group_problem(problem, size) for size in problem.topology.group_sizes()]
    fixed, own = block_loads_s(problem, blocks, groups)
    everyone = np.arange(problem.tree.num_requests, dtype=np.int64)
    for k, group in enumerate(groups):
        cp = group.topology.cp
        totals = with_wave_counts(
            problem, everyone, full_sharing_totals(problem, everyone), remote_ranks=cp - 1
        )
        barriers = np.asarray(group.card.constants.barrier_coefficients, dtype=np.float64)
        wave_s = group.card.wave_overhead_s + float((barriers @ totals).sum()) / cp
        assert 0.99 * wave_s <= fixed[k] + own[:, k].sum() <= wave_s * (1 + 1e-12)


def test_a_dynamic_pool_bound_counts_its_units():
    """Six prompts' rollouts, one item each (twelve items, six units: too many for the enumerated runs),
    on four GPUs under dynamic CP: placing the whole units (or paying a prompt's copy to split one) lifts
    the bound above the GPU-seconds share, and it stays at most the deterministic plan's makespan."""
    problem = _dynamic(rollouts(6, 2, seed=6))
    bound = plan_bound(problem)
    assert "enumerated_runs" not in bound.terms_s
    assert bound.terms_s["whole_blocks"] > bound.terms_s["gpu_seconds_over_pool"] * (1 + 1e-3)
    assert bound.bound_s <= solve(problem, load_solver("deterministic")).cost_s * (1 + 1e-12)


def test_a_cheap_split_caps_the_whole_blocks_floor():
    """Where splitting some unit costs its prompt's copy, the floor is at most the GPU-seconds share
    plus that copy over the pool: with no share given, exactly the least copy's share (the whole-blocks
    placement costs more)."""
    problem = _dynamic(rollouts(6, 2, seed=6))
    blocks = prefix_units(problem)
    groups = [group_problem(problem, size) for size in problem.topology.group_sizes()]
    barriers = np.min([np.asarray(g.card.constants.barrier_coefficients) for g in groups], axis=0)
    whole = unit_pieces_bound_s(problem, blocks, groups, barriers, np.inf)
    capped = unit_pieces_bound_s(problem, blocks, groups, barriers, 0.0)
    assert 0 < capped < whole


def test_items_sharing_nodes_count_each_shared_node_once():
    """Four items that share prefixes among themselves (no prefix all share), each a block: a node two
    blocks reach counts half to each, so every block's ``own`` together, with ``fixed``, stay at most
    the full-sharing wave of everything at each size (counted whole per block, the blocks' tokens came
    to 1,090 of the wave's 690, and the pool bound rose above an enumerated optimum)."""
    import dataclasses

    from tests.bound.enumerated import tiny_problem
    from tests.bound.test_all_plans_bound import CHUNKED

    problem = tiny_problem(CHUNKED, cp=1, chunk_tokens=128, room=0.65, model="qwen3-8b")
    pool = dataclasses.replace(
        problem,
        settings=dataclasses.replace(problem.settings, topology=Topology(cp=1, dp=2, dynamic_cp=True)),
    )
    blocks = tuple((i,) for i in range(pool.num_items))
    groups = [group_problem(pool, size) for size in pool.topology.group_sizes()]
    fixed, own = block_loads_s(pool, blocks, groups)
    everyone = np.arange(pool.tree.num_requests, dtype=np.int64)
    for k, group in enumerate(groups):
        cp = group.topology.cp
        totals = with_wave_counts(pool, everyone, full_sharing_totals(pool, everyone), remote_ranks=cp - 1)
        barriers = np.asarray(group.card.constants.barrier_coefficients, dtype=np.float64)
        wave_s = group.card.wave_overhead_s + float((barriers @ totals).sum()) / cp
        assert fixed[k] + own[:, k].sum() <= wave_s * (1 + 1e-12)
