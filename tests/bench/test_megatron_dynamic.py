"""Megatron-LM's dynamic-CP scheduler as a baseline: its group-size rule, its rounds over the pool,
and its plans priced and checked like every other baseline's."""

from __future__ import annotations

import numpy as np
import pytest

import cpplan
from cpplan.baselines import run
from cpplan.baselines.capacity import per_gpu_token_capacity
from cpplan.bench import megatron_dynamic
from cpplan.bench.megatron_dynamic import gpus_needed, next_round
from cpplan.pricing.problem import Problem
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload


def test_group_size_is_the_next_power_of_two_of_the_cap():
    """``max(1, 2 ** ceil(log2(L / cap)))``, at most the pool."""
    assert [gpus_needed(n, 1000, 8) for n in (1, 1000, 1001, 2000, 2001, 4000, 9000)] == [1, 1, 2, 2, 4, 4, 8]
    assert gpus_needed(100_000, 1000, 8) == 8


def test_a_round_opens_new_groups_then_fills_the_least_loaded():
    """Samples in decreasing length open groups on free aligned blocks while there are some, then go
    to the least-loaded group of their size; idle GPUs left at the end double the smallest groups."""
    samples = [(0, 4000, 4), (1, 900, 1), (2, 800, 1), (3, 700, 1), (4, 600, 1), (5, 500, 1)]
    groups, left = next_round(samples, 8)
    assert not left
    assert (groups[0].size, groups[0].index) == (4, 0)
    ranks = sorted(r for g in groups for r in g.ranks())
    assert ranks == list(range(8))
    assert sorted(i for g in groups for i in g.samples) == [0, 1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def problem(qwen36) -> Problem:
    """Two long requests and a dozen short ones on a dynamic pool of 8 GPUs at 8 GiB (8 layers)."""
    rng = np.random.default_rng(2)
    lengths = [40_000, 30_000, *rng.integers(500, 3000, 12).tolist()]
    workload = Workload(
        items=tuple(
            Item(id=f"i{k}", requests=(Request(tokens=rng.integers(0, 9000, n)),))
            for k, n in enumerate(lengths)
        )
    )
    settings = Settings.from_user(
        topology="dp=2,cp=4,dynamic_cp=1", model=qwen36, memory_bytes="8GiB", num_layers=8
    )
    return Problem.build(workload, settings)


def test_every_sample_is_its_own_wave_at_its_group_size(problem):
    """Each item runs alone without sharing, at a group size no smaller than the cap's rule, on an
    aligned block of the pool; the verifier finds nothing wrong but (possibly) the budget."""
    outcome = run(megatron_dynamic.BASELINE, problem)
    plan = outcome.plan
    cap = per_gpu_token_capacity(problem)
    assert sorted(w.items for w in plan.waves) == [(i,) for i in range(problem.num_items)]
    for wave, gpus in zip(plan.waves, plan.schedule.gpus, strict=True):
        assert wave.layout_name == "none" and gpus[0] % wave.cp == 0 and len(gpus) == wave.cp
        assert wave.cp >= gpus_needed(wave.logical_tokens, cap, 8)
    assert not outcome.other_violations and outcome.status in ("valid", "oom")


def test_its_valid_plans_are_never_cheaper_than_cpplan(problem):
    """cpplan's dynamic plan (the portfolio, every plan verified) is never costlier than a valid
    Megatron dynamic-CP plan of the same problem."""
    outcome = run(megatron_dynamic.BASELINE, problem)
    ours = cpplan.solve(problem, cpplan.load_solver("deterministic"))
    if outcome.valid:
        assert ours.cost_s <= outcome.plan.cost_s
