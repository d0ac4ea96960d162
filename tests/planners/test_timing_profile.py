"""The portfolio's wall-time estimates are one section of the solver profile, and ties say so."""

from __future__ import annotations

import pytest

from cpplan import InputError, Settings, Topology
from cpplan.planners import PLANNERS
from cpplan.planners.deadline import Deadline, verify_reserve_s
from cpplan.planners.portfolio import solve
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.profile import SolverProfile, TimingParams, load_solver


@pytest.fixture(scope="module")
def problem(qwen36, small_grpo) -> Problem:
    """Small GRPO on the Qwen3.6 card at CP2, 80 GiB, 8 layers."""
    return Problem.build(
        small_grpo, Settings(topology=Topology(cp=2), model=qwen36, memory_bytes=80 * 2**30, num_layers=8)
    )


def test_shipped_profiles_carry_the_measured_estimates():
    """Every shipped profile's timing section holds the values measured on the 2-core machine (the
    defaults), so planning behaves as it did before the section existed."""
    measured = {
        "verify_s": 0.004,
        "verify_s_per_token": 6e-9,
        "realize_s": 0.008,
        "realize_s_per_token": 1e-8,
        "min_search_s": 0.005,
        "build_s": 0.012,
        "build_s_per_item": 8e-4,
        "ownership_build_s": 0.004,
        "ownership_build_s_per_column": 0.015,
        "ownership_build_s_per_chunk": 2e-5,
        "seed_s_per_item": 4e-4,
        "seed_s_per_token": 1.2e-7,
        "finish_pricings": 8,
        "regroup_time_factor": 2.0,
        "bound_min_left_s": 0.5,
    }
    for name in ("runtime", "offline", "deterministic"):
        assert load_solver(name).timing.model_dump() == measured


def test_a_timing_table_is_read_and_checked(tmp_path):
    """A ``[timing]`` table in a profile's TOML overrides the estimates it names; an unknown or
    negative estimate is an InputError naming the field."""
    path = tmp_path / "quick.toml"
    path.write_text('name = "quick"\ntime_budget_s = 1.0\n[timing]\nverify_s = 0.01\n')
    profile = load_solver(path)
    assert profile.timing.verify_s == 0.01 and profile.timing.realize_s == TimingParams().realize_s
    for bad in ("verify_ms = 1.0", "verify_s = -1.0"):
        path.write_text(f'name = "quick"\ntime_budget_s = 1.0\n[timing]\n{bad}\n')
        with pytest.raises(InputError, match="timing"):
            load_solver(path)


def test_the_reserves_and_the_search_floor_come_from_the_profile(problem):
    """The verification reserve is the profile's, and a profile whose CP-SAT search floor exceeds its
    budget skips CP-SAT for lack of time, while the deadline the portfolio hands on carries the same
    estimates."""
    timing = TimingParams(verify_s=0.5)
    tokens = problem.logical_tokens(range(problem.num_items))
    assert verify_reserve_s(problem, timing) == 0.5 + timing.verify_s_per_token * tokens
    runtime = load_solver("runtime").with_time_budget(5.0)
    slow = runtime.model_copy(update={"timing": TimingParams(min_search_s=1e6)})
    seen: list[TimingParams] = []

    def recording(problem, profile, deadline):
        seen.append(deadline.timing)
        return PLANNERS["greedy"](problem, profile, deadline)

    result = solve(
        problem, slow, planners={"greedy": recording}, deadline=Deadline.after(5.0, deterministic=False)
    )
    reasons = {c.strategy: c.reason for c in result.candidates}
    assert reasons["cpsat"] == "skipped: no time left"
    assert seen == [slow.timing]


def test_an_equal_cost_loser_reads_tied(problem):
    """A valid plan that costs exactly what the chosen one does is reported as tied, not as "not
    below"; a costlier one as not below."""
    profile = SolverProfile(
        name="two", time_budget_s=1.0, deterministic=True, strategies=("greedy", "seeded")
    )
    same = {"seeded": PLANNERS["greedy"]}
    result = solve(problem, profile, planners=same, deadline=Deadline.of_profile(profile))
    winner, loser = result.candidates
    assert winner.reason.startswith("chosen") and loser.cost_s == winner.cost_s
    assert loser.reason.startswith("tied") and "not below" not in loser.reason
    apart = {"seeded": _one_item_per_wave}
    result = solve(problem, profile, planners=apart, deadline=Deadline.of_profile(profile))
    winner, loser = result.candidates
    assert loser.cost_s > winner.cost_s and "not below the chosen" in loser.reason


def _one_item_per_wave(problem, profile, deadline):
    """Every item in a wave of its own: a valid plan costlier than greedy's (more waves)."""
    waves = tuple(best_wave(problem, [i], profile.greedy.layouts)[0] for i in range(problem.num_items))
    return Plan(strategy="seeded", waves=waves), None
