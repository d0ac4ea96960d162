"""The dynamic-CP schedule model: optimal on tiny instances, never worse than its hint, and realized by
a replay that never exceeds its objective."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from ortools.sat.python import cp_model

from cpplan.cpsat.schedule_model import Job, add_hint, compile_schedule, hint_placements, realize
from cpplan.plans.plan import Plan
from cpplan.plans.pool_schedule import block, place, replay, timed, wave_counts


@dataclass(frozen=True)
class _Wave:
    """A stand-in for a priced wave: what the schedule model reads of one."""

    cp: int
    cost_s: float
    items: tuple[int, ...] = (0,)
    split: bool = False


def _solve(compiled, *, hint_plan=None, alts=None):
    if hint_plan is not None:
        add_hint(compiled, hint_placements(alts, hint_plan))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    assert solver.solve(compiled.model) == cp_model.OPTIMAL
    return solver


def _brute_force(alternatives, pool: int, padding_us: int | None = None) -> float:
    """The least makespan over every alternative choice, job order and block (with every GPU padded to
    the busiest one's wave count at ``padding_us`` a wave, when given): every semi-active schedule is a
    replay of its jobs in start order, so this enumerates them all."""
    best = float("inf")
    for choice in itertools.product(*(range(len(a)) for a in alternatives)):
        jobs = [job for k, a in enumerate(choice) for job in alternatives[k][a]]
        for order in itertools.permutations(jobs):
            for blocks in itertools.product(*(range(pool // j.size) for j in order)):
                gpus = [block(j.size, b) for j, b in zip(order, blocks, strict=True)]
                best = min(best, timed([j.duration_us for j in order], gpus, pool, padding_us).makespan_s)
    return best


def _job(cp: int, seconds: float) -> Job:
    return Job(waves=(_Wave(cp=cp, cost_s=seconds),))


TINY = [
    # one long item at 2 GPUs or on one; two short ones at 1 or together at 2
    [[(_job(2, 3.0),), (_job(1, 5.0),)], [(_job(1, 1.0),), (_job(2, 0.7),)], [(_job(1, 1.5),)]],
    [[(_job(1, 2.0), _job(1, 2.0)), (_job(2, 2.4),)], [(_job(2, 1.0),), (_job(1, 1.8),)]],
    [
        [(_job(4, 1.0),), (_job(2, 1.6),)],
        [(_job(1, 2.0),), (_job(2, 1.2),)],
        [(_job(2, 0.5),), (_job(1, 0.9),)],
    ],
]


@pytest.mark.parametrize("alternatives", TINY)
def test_model_optimum_is_the_brute_force_optimum(alternatives):
    """On tiny pools the model's optimal makespan equals the least over every group-size choice, job
    order and aligned block, and realizing it replays no longer than the model says."""
    pool = max(j.size for alts in alternatives for alt in alts for j in alt)
    pool = max(pool, 2)
    compiled = compile_schedule(alternatives, pool)
    solver = _solve(compiled)
    assert solver.objective_value == _brute_force(alternatives, pool)
    plan = realize(compiled, solver)
    assert plan.schedule.makespan_s <= solver.objective_value / 1e6 + 1e-12
    starts, makespan = replay([w.cost_s for w in plan.waves], plan.schedule.gpus, pool)
    assert list(plan.schedule.start_s) == starts and plan.schedule.makespan_s == makespan


def test_hinted_model_is_never_worse_than_its_hint():
    """Warm-started from a placed plan of the blocks' first alternatives, the solution's makespan is
    at most the hint's; with three equal single-GPU waves on two GPUs (makespan 6 s), running the third
    on both GPUs at 0.55 x its seconds finishes at 4.65 s."""
    waves = [_Wave(cp=1, cost_s=3.0, items=(i,)) for i in range(3)]
    order, schedule = place([w.cost_s for w in waves], [1] * 3, 2, [None] * 3)
    hint = Plan(strategy="greedy", waves=tuple(waves[i] for i in order), schedule=schedule)
    alternatives = [
        [(Job(waves=(w,)),), (Job(waves=(_Wave(cp=2, cost_s=w.cost_s * 0.55, items=w.items),)),)]
        for w in hint.waves
    ]
    compiled = compile_schedule(alternatives, 2)
    solver = _solve(compiled, hint_plan=hint, alts=alternatives)
    plan = realize(compiled, solver)
    assert hint.cost_s == 6.0 and plan.cost_s == pytest.approx(4.65, abs=1e-6)


@pytest.mark.parametrize("alternatives", TINY)
def test_model_with_equal_waves_is_the_padded_brute_force_optimum(alternatives):
    """Under equal waves (a padding wave of 0.4 s) the model's optimum equals the least padded makespan
    over every choice, order and block; it is at least the unpadded optimum, and realizing it pads every
    GPU to one count and replays no longer than the model says."""
    pool = max(2, max(j.size for alts in alternatives for alt in alts for j in alt))
    compiled = compile_schedule(alternatives, pool, 0.4)
    solver = _solve(compiled)
    assert solver.objective_value == _brute_force(alternatives, pool, 400_000)
    assert solver.objective_value >= _brute_force(alternatives, pool)
    plan = realize(compiled, solver)
    counts = wave_counts(plan.schedule.gpus, pool)
    assert len({n + p for n, p in zip(counts, plan.schedule.padding, strict=True)}) == 1
    assert plan.schedule.makespan_s <= solver.objective_value / 1e6 + 1e-12


def test_equal_waves_change_the_optimum_when_padding_binds():
    """Two single-GPU waves of 3 s and a third of 1 s (or 1.5 s on both GPUs) on two GPUs: unequal, the
    best is 4 s (3 | 3 then 1); under equal waves with 2 s padding that plan costs 5 s (the GPU with one
    wave pays a padding wave), so the model runs the third wave on both GPUs: 4.5 s, no padding."""
    alternatives = [
        [(_job(1, 3.0),)],
        [(_job(1, 3.0),)],
        [(_job(1, 1.0),), (_job(2, 1.5),)],
    ]
    plain = compile_schedule(alternatives, 2)
    assert _solve(plain).objective_value == 4_000_000
    padded = compile_schedule(alternatives, 2, 2.0)
    solver = _solve(padded)
    assert solver.objective_value == 4_500_000
    plan = realize(padded, solver)
    assert sorted(w.cp for w in plan.waves) == [1, 1, 2] and plan.schedule.padding == (0, 0)
