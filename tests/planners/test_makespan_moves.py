"""Items moved between a pool plan's waves where that ends the step sooner
(:mod:`cpplan.planners.makespan_moves`): units are the groups below the prefix a wave shares, the
neighbours start from the waves on the GPUs that end last, a neighbour is taken only where the makespan
falls, every item stays in exactly one wave, and the planner's ``cpsat`` candidate on a pool gets
them."""

from __future__ import annotations

import dataclasses

import pytest

from cpplan import Topology
from cpplan.api import build_problem
from cpplan.bench.suites import suite
from cpplan.planners.deadline import Deadline
from cpplan.planners.dynamic_cp import pool_padding_s
from cpplan.planners.makespan_moves import (
    critical_merges,
    critical_neighbours,
    gpu_ends,
    makespan_moved_plan,
    wave_units,
)
from cpplan.planners.portfolio import solve
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.spec.profile import load_solver
from cpplan.verifier import verify_plan

PROFILE = load_solver("deterministic")
LAYOUTS = PROFILE.greedy.layouts
UNLIMITED = Deadline.after(1.0, deterministic=True)
WITHOUT = PROFILE.model_copy(update={"moves": PROFILE.moves.model_copy(update={"max_pricings": 0})})


@pytest.fixture(scope="module")
def shuffled_pool():
    """The quick suite's eight GRPO groups of 8 rollouts arriving shuffled, on a pool of four GPUs under
    dynamic CP (two CP2 groups), 40 GiB each, and the deterministic profile's plan without the moves:
    four CP1 waves, two prompt groups each, ending 1.0725 to 1.2413 s when measured."""
    case = next(c for c in suite(quick=True) if c.name == "grpo_g8_shuffled")
    topology = Topology.parse("dp=2,cp=2,dynamic_cp=1")
    problem = build_problem(case.build(), topology=topology, model="qwen3.6-35b-a3b", memory_bytes="40GiB")
    return problem, solve(problem, WITHOUT)


def test_units_are_the_prompt_groups_below_the_shared_system_prompt(shuffled_pool):
    """Every wave's sixteen rollouts share the system prompt; its units are its two prompt groups of
    eight, each group's rollouts sharing their prompt."""
    problem, result = shuffled_pool
    for wave in result.plan.waves:
        units = wave_units(problem, wave.items)
        assert sorted(len(u) for u in units) == [8, 8]
        assert sorted(i for u in units for i in u) == sorted(wave.items)


def test_neighbours_start_from_the_waves_that_end_last(shuffled_pool):
    """Every neighbour takes items out of a wave on a GPU that ends last, keeps the two waves' items
    between them and leaves neither empty; the first ones swap whole prompt groups. The merges move
    every item of such a wave into each other wave of its size."""
    problem, result = shuffled_pool
    plan = result.plan
    ends = gpu_ends(plan)
    found = list(critical_neighbours(problem, plan))
    assert found
    for a, b, items_a, items_b in found:
        assert max(ends[g] for g in plan.schedule.gpus[a]) == max(ends)
        assert sorted(items_a + items_b) == sorted(plan.waves[a].items + plan.waves[b].items)
        assert items_a and items_b
    a, _, items_a, _ = found[0]
    assert len(set(plan.waves[a].items) - set(items_a)) == 8
    merges = list(critical_merges(problem, plan))
    assert len(merges) == plan.num_waves - 1
    for a, b, items_a, items_b in merges:
        assert max(ends[g] for g in plan.schedule.gpus[a]) == max(ends)
        assert not items_a and sorted(items_b) == sorted(plan.waves[a].items + plan.waves[b].items)


def test_a_wave_on_the_critical_gpu_is_merged_away(shuffled_pool):
    """A prompt group cut off into a wave of its own puts two waves on one GPU; merging waves only, the
    moves put it back into a wave with room: one wave fewer, the step ends sooner, every item in
    exactly one wave, and the verifier accepts the plan at its price."""
    from cpplan.plans.plan import placed_again
    from cpplan.pricing.problem import group_problem
    from cpplan.pricing.wave import best_wave

    problem, result = shuffled_pool
    plan = result.plan
    k = max(range(plan.num_waves), key=lambda w: plan.waves[w].cost_s)
    costliest = plan.waves[k]
    unit = wave_units(problem, costliest.items)[0]
    group = group_problem(problem, costliest.cp)
    kept, _ = best_wave(group, tuple(i for i in costliest.items if i not in unit), LAYOUTS)
    cut, _ = best_wave(group, unit, LAYOUTS)
    waves = (*plan.waves[:k], kept, *plan.waves[k + 1 :], cut)
    schedule = plan.schedule
    schedule = dataclasses.replace(
        schedule, gpus=(*schedule.gpus, schedule.gpus[k]), start_s=(*schedule.start_s, 0.0)
    )
    cut_plan = placed_again(dataclasses.replace(plan, waves=waves, schedule=schedule), None)
    assert cut_plan.cost_s > plan.cost_s
    moved = makespan_moved_plan(
        problem, cut_plan, LAYOUTS, max_pricings=120, deadline=UNLIMITED, merge_waves=True
    )
    assert moved is not None and moved.num_waves == cut_plan.num_waves - 1
    assert moved.cost_s < cut_plan.cost_s * 0.99
    assert sorted(i for w in moved.waves for i in w.items) == list(range(problem.num_items))
    verdict = verify_plan(plan_to_dict(problem, moved), problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid and verdict.cost_s == pytest.approx(moved.cost_s, rel=1e-9)


def test_moves_end_the_step_sooner_and_keep_every_item_once(shuffled_pool):
    """From the plan without moves, the moves lower the makespan by over 1% (1.2413 -> 1.2119 s when
    measured); every wave fits, every item is in exactly one wave, and the verifier accepts the plan at
    its price. No pricing allowed, no move; the same pricings, the same plan."""
    problem, result = shuffled_pool
    padding_s = pool_padding_s(problem)
    moved = makespan_moved_plan(
        problem, result.plan, LAYOUTS, max_pricings=120, deadline=UNLIMITED, padding_s=padding_s
    )
    assert moved is not None and moved.cost_s < result.plan.cost_s * 0.99
    assert all(w.fits(problem.memory_bytes) for w in moved.waves)
    assert sorted(i for w in moved.waves for i in w.items) == list(range(problem.num_items))
    verdict = verify_plan(plan_to_dict(problem, moved), problem.workload, problem.card, problem.memory_bytes)
    assert verdict.valid and verdict.cost_s == pytest.approx(moved.cost_s, rel=1e-9)
    assert makespan_moved_plan(problem, result.plan, LAYOUTS, max_pricings=0, deadline=UNLIMITED) is None
    again = makespan_moved_plan(
        problem, result.plan, LAYOUTS, max_pricings=120, deadline=UNLIMITED, padding_s=padding_s
    )
    assert [w.items for w in again.waves] == [w.items for w in moved.waves]


def test_the_pools_cpsat_plan_gets_the_moves(shuffled_pool):
    """The planner's plan on the pool with the moves ends over 1% sooner than without them (its
    ``moves.max_pricings`` at 0), and the ``cpsat`` candidate is the one moved."""
    problem, without = shuffled_pool
    chosen = solve(problem, PROFILE)
    assert chosen.cost_s < without.cost_s * 0.99
    cpsat = next(c for c in chosen.candidates if c.strategy == "cpsat")
    assert cpsat.cost_s == pytest.approx(chosen.cost_s, rel=1e-12)


def test_a_plan_splitting_an_item_is_left_alone(shuffled_pool):
    """A plan with a wave holding part of an item is not moved (its items are not whole)."""
    problem, result = shuffled_pool
    plan = result.plan
    split = dataclasses.replace(plan.waves[0], split=True)
    plan = dataclasses.replace(plan, waves=(split, *plan.waves[1:]))
    assert makespan_moved_plan(problem, plan, LAYOUTS, max_pricings=120, deadline=UNLIMITED) is None


def test_waves_of_unrelated_items_move_them_one_by_one():
    """The quick suite's long tail on a pool of two CP2 groups: its items share nothing, so every unit
    is one item; the moves still swap and move them, and end the step sooner than the plan without
    moves (2.7558 -> 2.7469 s when measured)."""
    case = next(c for c in suite(quick=True) if c.name == "long_tail")
    problem = build_problem(
        case.build(), topology=Topology.parse("dp=2,cp=2"), model="qwen3.6-35b-a3b", memory_bytes="40GiB"
    )
    plan = solve(problem, WITHOUT).plan
    assert all(len(u) == 1 for w in plan.waves for u in wave_units(problem, w.items))
    moved = makespan_moved_plan(problem, plan, LAYOUTS, max_pricings=120, deadline=UNLIMITED)
    assert moved is not None and moved.cost_s < plan.cost_s * (1 - 1e-3)
    assert sorted(i for w in moved.waves for i in w.items) == list(range(problem.num_items))
