"""Every CP-SAT stage decides from the profile's estimates, before building, whether it can finish in
the time left; an expired clock still gets greedy's verified plan, every skipped stage saying so.
No test here is timed: deadlines are seconds or hours away, and the estimates are set to decide."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

import cpplan.cpsat.owned_model as owned_model
import cpplan.planners.cpsat_strategy as cpsat_strategy
from cpplan import Settings, Topology
from cpplan.planners.deadline import NO_TIME, Deadline
from cpplan.planners.decide import affordable_columns, free_chunks
from cpplan.planners.greedy import best_greedy_plan
from cpplan.planners.portfolio import solve
from cpplan.planners.seeded import seeded_plan
from cpplan.plans.outcome import Status
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.profile import TimingParams, load_solver

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def problem(qwen36, small_grpo) -> Problem:
    """Small GRPO on the Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Problem.build(
        small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)
    )


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The CP-SAT models built during a test, by name (the real builders still run)."""
    built: list[str] = []
    joint, owned = cpsat_strategy.compile_for, owned_model.compile_owned

    def compile_for(*args, **kwargs):
        built.append("joint")
        return joint(*args, **kwargs)

    def compile_owned(*args, **kwargs):
        built.append("ownership")
        return owned(*args, **kwargs)

    monkeypatch.setattr(cpsat_strategy, "compile_for", compile_for)
    monkeypatch.setattr(owned_model, "compile_owned", compile_owned)
    return built


def _hours_ago(seconds: float) -> Deadline:
    """A wall-clock deadline of ``seconds`` that started an hour ago: long expired."""
    return Deadline.after(seconds, deterministic=False, start_s=time.perf_counter() - 3600.0)


def test_an_expired_clock_gets_greedys_verified_plan_and_builds_no_model(problem, builds):
    """Under a runtime profile whose clock ran out before the call, the answer is greedy's plan,
    verified valid; no CP-SAT model is built, and the joint and ownership stages report ``no_time``
    while full sharing and the seeded proposer are reported skipped."""
    result = solve(problem, load_solver("runtime"), deadline=_hours_ago(0.1))
    assert builds == []
    assert result.strategy == "greedy"
    winner = next(c for c in result.candidates if c.strategy == "greedy")
    assert winner.valid and winner.reason.startswith("chosen")
    reasons = {c.strategy: c.reason for c in result.candidates}
    assert reasons["full_sharing"] == NO_TIME and reasons["seeded"] == NO_TIME
    statuses = {o.model: o.status for o in result.solver.outcomes}
    assert statuses == {"joint": Status.NO_TIME, "ownership": Status.NO_TIME}


def test_the_joint_estimate_decides_whether_the_joint_model_is_built(problem, builds):
    """The joint model is built when the time left covers ``joint_needs_s`` of the step's items and is
    not (outcome ``no_time``) when the estimate's fixed part alone exceeds it."""
    profile = load_solver("runtime")
    greedy = best_greedy_plan(problem, LAYOUTS, Deadline.after(1.0, deterministic=True))
    params = profile.cpsat
    for build_s, built in ((3600.0, []), (0.0, ["joint"])):
        slow = profile.model_copy(update={"timing": TimingParams(build_s=build_s)})
        assert (slow.timing.joint_needs_s(problem.num_items) > 60.0) is not built
        builds.clear()
        _, stats = cpsat_strategy.joint_plan(
            problem, slow, greedy, Deadline.after(60.0, deterministic=False), params
        )
        assert builds == built
        assert (stats.outcomes[-1].status is Status.NO_TIME) is not built


def test_the_ownership_estimate_frees_the_costliest_columns_that_fit(problem):
    """With one second per free chunk, a deadline covering both free columns keeps both free, one
    covering only the costlier keeps it alone free, one covering neither frees none, and one below the
    model's fixed part gives no model at all; a deterministic deadline keeps every column free."""
    greedy = best_greedy_plan(problem, LAYOUTS, Deadline.after(1.0, deterministic=True))
    singles = tuple(best_wave(problem, [i], LAYOUTS)[0] for i in range(2))
    columns = owned_model.pool_columns(problem, [greedy.waves, singles], max_free=0)
    assert len(columns) == 3
    first, second = sorted(range(3), key=lambda g: -columns[g].wave.cost_s)[:2]
    assert columns[first].wave.cost_s > columns[second].wave.cost_s
    columns = tuple(replace(c, free=g in (first, second)) for g, c in enumerate(columns))
    costly, cheap = (int(columns[g].wave.owner.size) for g in (first, second))
    timing = TimingParams(
        ownership_build_s=0.0,
        ownership_build_s_per_column=0.0,
        ownership_build_s_per_chunk=1.0,
        min_search_s=0.0,
    )

    def free_after(left_s: float) -> list[bool] | None:
        kept = affordable_columns(columns, timing, Deadline.after(left_s, deterministic=False))
        return None if kept is None else [c.free for c in kept]

    assert free_after(costly + cheap + 0.5) == [c.free for c in columns]
    assert free_after(costly + 0.5) == [g == first for g in range(3)]
    assert free_after(0.5) == [False] * 3
    fixed = timing.model_copy(update={"ownership_build_s": 10.0})
    assert affordable_columns(columns, fixed, _hours_ago(1)) is None
    assert affordable_columns(columns, timing, Deadline.after(0.0, deterministic=True)) == columns
    assert free_chunks(columns) == costly + cheap


def test_estimates_never_change_a_deterministic_plan(problem, builds):
    """Under the trainer profile (work limits, no clock) estimates that no clock could meet change
    nothing: both CP-SAT models are built and the plan is byte for byte the one of the shipped
    estimates."""
    trainer = load_solver("trainer")
    impossible = TimingParams(build_s=3600.0, ownership_build_s=3600.0, min_search_s=3600.0)
    slow = trainer.model_copy(update={"timing": impossible})
    shipped = solve(problem, trainer)
    builds.clear()
    hurried = solve(problem, slow)
    assert builds == ["joint", "ownership"]
    assert plan_to_dict(problem, hurried.plan) == plan_to_dict(problem, shipped.plan)


def test_the_seed_estimate_decides_whether_the_first_seed_starts(problem):
    """The seeded strategy starts its first seed only when the time left covers ``seed_needs_s`` of
    the step (its items and tokens): an hour per token leaves it without a plan, none gives one."""
    for per_token, planned in ((3600.0, False), (0.0, True)):
        timing = TimingParams(seed_s_per_item=0.0, seed_s_per_token=per_token)
        deadline = replace(Deadline.after(60.0, deterministic=False), timing=timing)
        assert (seeded_plan(problem, LAYOUTS, deadline=deadline) is not None) is planned
