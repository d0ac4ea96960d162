"""The Deadline every strategy shares: deterministic ones never expire, shares of the time left."""

from __future__ import annotations

import math
import time

import pytest

from cpplan import Settings, Topology
from cpplan.planners.cpsat_planner import cpsat_planner
from cpplan.planners.deadline import Deadline
from cpplan.planners.portfolio import solve
from cpplan.planners.seeded import seeded_plan
from cpplan.plans.outcome import Status
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import load_solver

LAYOUTS = ("full", "none", "min_span:512")


@pytest.fixture(scope="module")
def settings(qwen36) -> Settings:
    """The Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)


def test_deterministic_deadline_never_expires():
    """A deterministic deadline has unlimited time left whatever its budget, never expires, and its
    shares and reserves are itself."""
    deadline = Deadline.after(0.0, deterministic=True)
    time.sleep(0.001)
    assert deadline.deterministic and not deadline.expired()
    assert deadline.left_s() == math.inf
    assert deadline.share(0.5) is deadline and deadline.less(10.0) is deadline


def test_wall_clock_deadline_counts_down_and_shares_the_time_left():
    """A wall-clock deadline expires after its budget; a share ends at that fraction of the time left,
    a reserve that many seconds earlier, and neither moves the start the elapsed time counts from."""
    assert Deadline.after(0.0, deterministic=False).expired()
    deadline = Deadline.after(100.0, deterministic=False)
    assert not deadline.expired() and 99.0 < deadline.left_s() <= 100.0
    half = deadline.share(0.5)
    assert 49.0 < half.left_s() <= 50.0 and half.start_s == deadline.start_s
    assert deadline.less(30.0).end_s == pytest.approx(deadline.end_s - 30.0)
    assert deadline.less(200.0).expired()
    started = time.perf_counter() - 2.0
    assert Deadline.after(1.0, deterministic=False, start_s=started).expired()
    assert Deadline.after(1.0, deterministic=False, start_s=started).elapsed_s() >= 2.0


def test_seeded_strategy_starts_no_seed_after_its_deadline(small_grpo, settings):
    """The seeded strategy starts no seed once its deadline has passed, and with a deterministic
    deadline runs every seed, exactly as without one."""
    problem = Problem.build(small_grpo, settings)
    assert seeded_plan(problem, LAYOUTS, deadline=Deadline.after(0.0, deterministic=False)) is None
    every = seeded_plan(problem, LAYOUTS)
    same = seeded_plan(problem, LAYOUTS, deadline=Deadline.after(0.0, deterministic=True))
    assert every is not None and same is not None and same.cost_s == every.cost_s


def test_cpsat_strategy_skips_without_time_left(small_grpo, settings):
    """With the deadline less the realize/verify reserve already past, CP-SAT is not started and says
    so; the portfolio still returns greedy's plan (packed at once with full sharing, its reason says
    the deadline was reached), and skips every strategy after it, saying so, and the solver block
    says CP-SAT did not run."""
    problem = Problem.build(small_grpo, settings)
    runtime = load_solver("runtime")
    plan, stats = cpsat_planner(problem, runtime, Deadline.after(0.0, deterministic=False))
    assert plan is None and stats.status == Status.NO_TIME
    result = solve(problem, runtime, deadline=Deadline.after(0.0, deterministic=False))
    reasons = {c.strategy: c.reason for c in result.candidates}
    assert reasons["cpsat"] == reasons["seeded"] == reasons["full_sharing"] == "skipped: no time left"
    assert result.strategy == "greedy" and "deadline reached" in reasons["greedy"]
    assert result.solver.status == Status.NO_TIME


def test_slowed_timing_multiplies_what_work_needs_and_keeps_the_reserves():
    """``timing.slowed(factor)`` multiplies every estimate of what work needs before it starts (a field
    in seconds, whole or per unit) by the factor and leaves the reserves for realizing and verifying,
    counts and factors alone; at a factor of 1 it is ``timing`` itself."""
    from cpplan.spec.profile import RESERVES, TimingParams

    timing = TimingParams()
    twice = timing.slowed(2.0)
    seconds = [n for n in TimingParams.model_fields if n.endswith("_s") or "_s_per_" in n]
    assert {"ownership_build_s_per_chunk", "min_search_s", "seed_s_per_token"} <= set(seconds)
    for name in seconds:
        expected = getattr(timing, name) * (1 if name in RESERVES else 2)
        assert getattr(twice, name) == pytest.approx(expected), name
    assert twice.verify_reserve_s(10**6) == timing.verify_reserve_s(10**6)
    assert twice.joint_needs_s(10) == pytest.approx(2 * timing.joint_needs_s(10))
    assert twice.finish_pricings == timing.finish_pricings
    assert twice.regroup_time_factor == timing.regroup_time_factor
    assert timing.slowed(1.0) is timing


def test_the_proposers_leave_the_ownership_stage_what_its_smallest_model_needs(settings):
    """The proposers stop the ownership stage's share of the budget before the search deadline, or,
    where the ``[timing]`` estimates have grown (a busy machine), early enough to leave what the
    ownership model without free columns needs to be built, searched and realized."""
    from cpplan.bench.synthetic import grpo
    from cpplan.planners.budget import Budget

    step = grpo(
        num_prompts=2, group_size=4, system_tokens=0, prompt_tokens=(64, 128), completion_tokens=(16, 32)
    )
    problem = Problem.build(step, settings)
    profile = load_solver("runtime")
    start = Deadline.of_profile(profile)
    budget = Budget.start(problem, profile, start)
    share_s = profile.ownership.share * profile.time_budget_s
    assert budget.verify_by.end_s - budget.proposers_by().end_s == pytest.approx(share_s)
    busy = profile.model_copy(update={"timing": profile.timing.slowed(5.0)})
    budget = Budget.start(problem, busy, start)
    least_s = busy.timing.ownership_needs_s(0, 0) + budget.realize_s
    assert least_s > share_s and budget.realize_s > 0
    assert budget.verify_by.end_s - budget.proposers_by().end_s == pytest.approx(least_s)
