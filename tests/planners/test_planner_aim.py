"""A kept Planner under the clock aims its calls early by how late the recent ones ended."""

from __future__ import annotations

import gc
import time

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
