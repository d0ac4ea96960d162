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


def test_slowed_timing_divides_every_estimate_in_seconds_by_the_cpu_share():
    """``slowed(timing, share)`` divides every wall-time estimate (a field in seconds, whole or per
    unit) by the CPU share and leaves counts and factors alone; at a share of 1 it is ``timing`` itself."""
    from cpplan.planners.deadline import slowed
    from cpplan.spec.profile import TimingParams

    timing = TimingParams()
    half = slowed(timing, 0.5)
    seconds = [n for n in TimingParams.model_fields if n.endswith("_s") or "_s_per_" in n]
    assert {"verify_s", "realize_s_per_token", "ownership_build_s_per_chunk", "min_search_s"} <= set(seconds)
    for name in seconds:
        assert getattr(half, name) == pytest.approx(2 * getattr(timing, name)), name
    assert half.finish_pricings == timing.finish_pricings
    assert half.regroup_time_factor == timing.regroup_time_factor
    assert half.joint_needs_s(10) == pytest.approx(2 * timing.joint_needs_s(10))
    assert slowed(timing, 1.0) is timing
