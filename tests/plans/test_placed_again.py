"""Stage 3 of the planner's loop on a pool of CP groups: decided waves placed again."""

from __future__ import annotations

import dataclasses

import pytest

import cpplan
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.subproblem import SubProblem
from cpplan.plans.plan import Plan, balanced, placed_again
from cpplan.plans.pool_schedule import timed
from cpplan.pricing.problem import Problem
from cpplan.spec.settings import Settings
from tests.conftest import make_workload


@pytest.fixture(scope="module")
def four_waves(qwen36) -> Plan:
    """Four one-request waves of 4k, 3k, 2k and 1k tokens on a pool of two CP1 groups, placed longest
    first: the 4k and 1k waves on one GPU, the 3k and 2k waves on the other."""
    workload = make_workload(*([[7] * n] for n in (4000, 3000, 2000, 1000)))
    settings = Settings.from_user(topology=cpplan.Topology(dp=2, cp=1), model=qwen36, memory_bytes="40GiB")
    problem = Problem.build(workload, settings)
    subs = [SubProblem.of(problem, [item]) for item in range(4)]
    waves = tuple(sub.to_parent(w) for sub in subs for w in cached_greedy_plan(sub.problem, ("full",)).waves)
    return balanced(Plan(strategy="greedy", waves=waves), pool=2)


def _costs(plan: Plan, factor: dict[int, float]) -> Plan:
    """``plan`` with some waves (by index) priced ``factor`` times their cost, its schedule as it was."""
    waves = tuple(
        dataclasses.replace(w, cost_s=w.cost_s * factor.get(k, 1.0)) for k, w in enumerate(plan.waves)
    )
    return dataclasses.replace(plan, waves=waves)


def _gpus_by_items(plan: Plan) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Which GPUs each wave (by its items) runs on."""
    return {w.items: g for w, g in zip(plan.waves, plan.schedule.gpus, strict=True)}


def test_waves_keep_their_gpus_where_that_stays_the_best_placement(four_waves):
    """A wave made a little cheaper keeps every wave on its GPUs, and the makespan is timed again from
    the new costs (it drops)."""
    cheaper = _costs(four_waves, {0: 0.9})
    again = placed_again(cheaper)
    assert _gpus_by_items(again) == _gpus_by_items(four_waves)
    assert again.cost_s < four_waves.cost_s
    per_gpu = [
        sum(w.cost_s for w, g in zip(again.waves, again.schedule.gpus, strict=True) if g == (r,))
        for r in (0, 1)
    ]
    assert again.cost_s == pytest.approx(max(per_gpu))


def test_waves_move_where_a_fresh_placement_ends_sooner(four_waves):
    """Where the decided costs make the old placement lopsided (the longest wave now the cheapest), the
    waves are placed afresh: the makespan is the fresh placement's, below the old GPUs' timing."""
    order = [w.logical_tokens for w in four_waves.waves]
    longest = order.index(max(order))
    lopsided = _costs(four_waves, {longest: 0.1})
    again = placed_again(lopsided)
    fresh = balanced(dataclasses.replace(lopsided, schedule=None), pool=2)
    in_place = timed([w.cost_s for w in lopsided.waves], lopsided.schedule.gpus, 2)
    assert again.cost_s == fresh.cost_s < in_place.makespan_s
    assert _gpus_by_items(again) != _gpus_by_items(lopsided)
