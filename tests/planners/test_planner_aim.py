"""A kept Planner under the clock aims its calls early by how late the recent ones ended."""

from __future__ import annotations

import gc
import time

import pytest

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.planners import PLANNERS
from cpplan.planners.deadline import Deadline
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile

BUDGET_S = 1.0


def _step() -> cpplan.Workload:
    return grpo(
        num_prompts=2, group_size=4, system_tokens=0, prompt_tokens=(64, 128), completion_tokens=(16, 32)
    )


def _spy(seen: list[float], late_s: float):
    """Greedy that records the budget its call aimed at (its profile's), then runs until ``late_s``
    past the call's whole budget."""

    def strategy(problem: Problem, profile: SolverProfile, deadline: Deadline):
        seen.append(profile.time_budget_s)
        time.sleep(max(0.0, deadline.start_s + BUDGET_S + late_s - time.perf_counter()))
        return PLANNERS["greedy"](problem, profile, deadline)

    return strategy


def test_a_call_aims_early_by_how_late_the_last_ones_ended():
    """After a call that ended at least 40 ms past its budget, the next call aims at least 40 ms
    earlier (never more than half the budget); a call later than half the budget (its floor, not the
    aim) does not move the aim further, and calls that ended in time move it back; under a
    deterministic profile the budget never moves."""
    planner = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="runtime")
    seen: list[float] = []
    planner.plan(_step(), BUDGET_S, planners={"greedy": _spy(seen, 0.04)})
    in_time = {"greedy": _spy(seen, -BUDGET_S)}
    planner.plan(_step(), BUDGET_S, planners=in_time)
    assert seen[0] == BUDGET_S
    assert 0.04 <= seen[0] - seen[1] <= BUDGET_S / 2
    planner.plan(_step(), BUDGET_S, planners={"greedy": _spy(seen, 0.6 * BUDGET_S)})  # its floor: not counted
    planner.plan(_step(), BUDGET_S, planners=in_time)
    assert seen[3] >= seen[1]
    steady = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="trainer")
    fixed: list[float] = []
    steady.plan(_step(), planners={"greedy": _spy(fixed, -BUDGET_S)})
    steady.plan(_step(), planners={"greedy": _spy(fixed, -BUDGET_S)})
    assert fixed[0] == fixed[1]


def test_the_garbage_collector_waits_for_a_call_under_the_clock():
    """During a call under the clock Python's cyclic collector is paused (a full collection of a large
    process would take a budget's worth) and it runs again after the call; a deterministic profile's
    call leaves it running."""
    inside: list[bool] = []

    def probe(problem: Problem, profile: SolverProfile, deadline: Deadline):
        inside.append(gc.isenabled())
        return PLANNERS["greedy"](problem, profile, deadline)

    for solver in ("runtime", "trainer"):
        planner = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver=solver)
        planner.plan(_step(), planners={"greedy": probe})
        assert gc.isenabled()
    assert inside == [False, True]


def _idle_spy(seen: list[SolverProfile], idle_s: float):
    """Greedy that records the profile its call got, then waits ``idle_s`` without using the CPU (as a
    call does whose CPU is taken by other processes)."""

    def strategy(problem: Problem, profile: SolverProfile, deadline: Deadline):
        seen.append(profile)
        time.sleep(idle_s)
        return PLANNERS["greedy"](problem, profile, deadline)

    return strategy


def test_a_call_that_got_little_cpu_makes_the_next_expect_its_work_to_take_longer():
    """After calls whose thread got well under three quarters of a CPU (they waited on the clock, as
    beside busy processes), the next call's estimates of what work needs are larger by how much less
    they got (at most five-fold), so every stage takes up only what it can finish, and its reserves
    are the profile's; before any call, and under a deterministic profile whatever the calls got, the
    estimates are the profile's own."""
    planner = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="runtime")
    seen: list[SolverProfile] = []
    for _ in range(3):
        planner.plan(_step(), BUDGET_S, planners={"greedy": _idle_spy(seen, 0.3)})
    shipped = planner.profile.timing
    assert seen[0].timing == shipped
    later = seen[-1].timing
    assert 1.5 * shipped.ownership_build_s <= later.ownership_build_s <= 5 * shipped.ownership_build_s
    assert later.min_search_s / shipped.min_search_s == pytest.approx(later.build_s / shipped.build_s)
    assert later.verify_s == shipped.verify_s and later.realize_s == shipped.realize_s
    assert later.finish_pricings == shipped.finish_pricings
    steady = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="trainer")
    fixed: list[SolverProfile] = []
    for _ in range(3):
        steady.plan(_step(), planners={"greedy": _idle_spy(fixed, 0.3)})
    assert all(p.timing == steady.profile.timing for p in fixed)


def _share_spy(budgets: list[float], took_s: float):
    """Greedy that records the budget its replica share got, then takes ``took_s`` (at least)."""

    def strategy(problem: Problem, profile: SolverProfile, deadline: Deadline):
        budgets.append(profile.time_budget_s)
        time.sleep(took_s)
        return PLANNERS["greedy"](problem, profile, deadline)

    return strategy


def test_a_partitioned_step_keeps_the_floors_of_the_shares_still_to_plan():
    """Under the clock a partitioned step gives each replica share an even part of the time left while
    every share still to plan can have the floor a share took (until its greedy plan); once they
    cannot, the next shares get only the least budget (no search), and the next step starts from the
    floor its last one measured. Where the floors are short, the shares get even parts."""
    from cpplan.planner import _MIN_SHARE_S

    step = grpo(
        num_prompts=4, group_size=4, system_tokens=0, prompt_tokens=(64, 128), completion_tokens=(16, 32)
    )
    planner = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology=cpplan.Topology(dp=4, cp=2), memory_bytes="8GiB", solver="runtime"
    )
    budgets: list[float] = []
    planner.plan(step, BUDGET_S, planners={"greedy": _share_spy(budgets, 0.3)})
    # 0.25 s each, but the first share's floor took 0.3 s: three more need more than the 0.7 s left
    assert budgets[0] == pytest.approx(BUDGET_S / 4, rel=0.05)
    assert budgets[1:] == [_MIN_SHARE_S] * 3
    budgets.clear()
    planner.plan(step, BUDGET_S, planners={"greedy": _share_spy(budgets, 0.3)})
    assert budgets == [_MIN_SHARE_S] * 4  # four floors of 0.3 s (the last step's) need more than 1 s
    budgets.clear()
    quick = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology=cpplan.Topology(dp=4, cp=2), memory_bytes="8GiB", solver="runtime"
    )
    quick.plan(step, BUDGET_S, planners={"greedy": _share_spy(budgets, 0.0)})
    assert all(b > BUDGET_S / 5 for b in budgets) and len(budgets) == 4


def test_a_call_aims_early_where_a_quarter_of_the_recent_calls_ended_late():
    """Of the last 8 calls, 3 ended 40 ms past their budget and 5 in time: the next call aims at least
    40 ms early (the 75th percentile of their lateness; their median, in time, would not move it)."""
    budget_s = 0.3
    planner = cpplan.Planner(model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="runtime")
    seen: list[float] = []

    def spy(late_s: float):
        def strategy(problem: Problem, profile: SolverProfile, deadline: Deadline):
            seen.append(profile.time_budget_s)
            time.sleep(max(0.0, deadline.start_s + budget_s + late_s - time.perf_counter()))
            return PLANNERS["greedy"](problem, profile, deadline)

        return strategy

    for late_s in [-budget_s] * 5 + [0.04] * 3:
        planner.plan(_step(), budget_s, planners={"greedy": spy(late_s)})
    planner.plan(_step(), budget_s, planners={"greedy": spy(-budget_s)})
    assert budget_s - seen[-1] >= 0.04
