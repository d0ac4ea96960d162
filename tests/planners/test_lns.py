"""Large-neighbourhood search: above max_items the joint model re-solves adjacent waves, each answer
verified before it replaces them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cpplan
import cpplan.planners.lns as lns_module
from cpplan.planners.cpsat_planner import cpsat_planner
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import greedy_plan
from cpplan.planners.lns import lns_plan
from cpplan.planners.subproblem import SubProblem
from cpplan.plans.outcome import ModelOutcome, Status
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict, strip_timing
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.settings import Settings
from cpplan.verifier import verify_plan
from tests.support.grpo_arrivals import grouped_and_shuffled


@pytest.fixture(scope="module")
def interleaved(qwen36) -> Problem:
    """Four GRPO groups of 8 rollouts arriving shuffled (one item each), at CP2 and 8 layers, with room
    for 8 items a wave: in-order greedy splits every group."""
    _, workload = grouped_and_shuffled()
    settings = Settings(topology=cpplan.Topology(cp=2), model=qwen36, memory_bytes=2**60, num_layers=8)
    budget = best_wave(Problem.build(workload, settings), range(8), ("full",))[0].peak_bytes
    return Problem.build(workload, dataclasses.replace(settings, memory_bytes=budget))


@pytest.fixture(scope="module")
def small_windows() -> cpplan.SolverProfile:
    """The deterministic profile with max_items 10: a 32-item workload goes to LNS."""
    profile = cpplan.load_solver("deterministic")
    return profile.model_copy(update={"joint": profile.joint.model_copy(update={"max_items": 10})})


def _cpsat(problem: Problem, profile: cpplan.SolverProfile):
    return cpsat_planner(problem, profile, Deadline.after(profile.time_budget_s, deterministic=True))


def _lns(problem: Problem, profile: cpplan.SolverProfile):
    """LNS from greedy's plan in arrival order (the greedy candidate itself may have regrouped)."""
    in_order = greedy_plan(problem, profile.greedy.layouts)
    deadline = Deadline.after(1.0, deterministic=True)
    return in_order, lns_plan(
        problem, profile, in_order, deadline, profile.joint.share * profile.time_budget_s
    )


def _window_search(stats) -> ModelOutcome:
    """The window search's outcome among the statistics' runs."""
    return next(o for o in stats.outcomes if o.model == "lns")


def test_lns_improves_the_greedy_plan_and_its_plan_verifies(interleaved, small_windows):
    """Above max_items the CP-SAT strategy runs LNS (its outcome counts the windows, before the
    ownership model's); from greedy's in-order plan, re-solving windows of adjacent waves gives a plan
    that passes the independent verifier and costs far less."""
    _, stats = _cpsat(interleaved, small_windows)
    assert [o.model for o in stats.outcomes] == ["lns", "ownership"]
    assert "windows solved" in _window_search(stats).detail
    in_order, (plan, stats) = _lns(interleaved, small_windows)
    assert plan is not None and plan.strategy == "cpsat"
    found = _window_search(stats)
    assert found.status is Status.FEASIBLE and "rejected" not in found.detail
    assert plan.cost_s < in_order.cost_s * 0.95
    data = plan_to_dict(interleaved, plan)
    verdict = verify_plan(data, interleaved.workload, interleaved.card, interleaved.memory_bytes)
    assert verdict.valid, verdict.violations
    assert sorted(i for w in plan.waves for i in w.items) == list(range(interleaved.num_items))


def test_lns_is_deterministic(interleaved, small_windows):
    """Under the deterministic profile two runs (fresh problems) give the same plan, byte for byte."""
    _, (first, _) = _lns(interleaved, small_windows)
    again = Problem.build(interleaved.workload, interleaved.settings)
    _, (second, _) = _lns(again, small_windows)
    assert strip_timing(plan_to_dict(interleaved, first)) == strip_timing(plan_to_dict(again, second))


def test_an_invalid_window_answer_is_rejected(interleaved, small_windows, monkeypatch):
    """A window answer the verifier refuses (here one that drops an item) never replaces the window:
    every window is rejected, nothing improves, and the status says so."""

    def dropping(problem, profile, incumbent, deadline, params, *, model):
        waves = incumbent.waves
        broken = (
            dataclasses.replace(waves[0], items=waves[0].items[:-1]) if len(waves[0].items) > 1 else waves[0]
        )
        cheaper = dataclasses.replace(broken, cost_s=broken.cost_s * 0.5)
        return Plan(strategy="cpsat", waves=(cheaper, *waves[1:])), cpplan.SolverStats(
            outcomes=(ModelOutcome(model="ownership", status=Status.FEASIBLE),)
        )

    monkeypatch.setattr(lns_module, "joint_plan", dropping)
    _, (plan, stats) = _lns(interleaved, small_windows)
    found = _window_search(stats)
    assert plan is None and "0 improved" in found.detail and "rejected" in found.detail


def test_sub_problem_waves_carry_over_unchanged(interleaved):
    """A wave priced in a sub-problem of some items is, mapped back, the parent's own wave of those
    items: same requests, segments and prices, and it verifies in the parent."""
    items = [3, 7, 8, 20]
    sub = SubProblem.of(interleaved, items)
    inside, _ = best_wave(sub.problem, range(len(items)), ("full",))
    mapped = sub.to_parent(inside)
    direct, _ = best_wave(interleaved, items, ("full",))
    assert mapped.items == tuple(items)
    assert np.array_equal(mapped.layout.request_ids, direct.layout.request_ids)
    assert np.array_equal(mapped.layout.seg_length, direct.layout.seg_length)
    assert mapped.cost_s == pytest.approx(direct.cost_s, rel=1e-12)
    back = sub.from_parent(mapped)
    assert back.items == inside.items and np.array_equal(back.layout.seg_src, inside.layout.seg_src)


def test_a_window_limit_is_capped_by_max_window_share():
    """Under a deterministic profile a window's deterministic limit is the pass's limit divided by the
    windows left, capped at ``lns.max_window_share`` of the budget where the profile sets it."""
    base = cpplan.load_solver("deterministic")
    uncapped = base.model_copy(update={"lns": base.lns.model_copy(update={"max_window_share": None})})
    capped = base.model_copy(update={"lns": base.lns.model_copy(update={"max_window_share": 0.001})})
    assert lns_module._window_params(uncapped, 2.0, 4, capped=True).deterministic_time_s == pytest.approx(0.5)
    limit = lns_module._window_params(capped, 2.0, 4, capped=True).deterministic_time_s
    assert limit == pytest.approx(0.001 * base.time_budget_s)


@pytest.mark.parametrize(("capped_from_items", "capped"), [(32, True), (33, False)])
def test_the_window_cap_holds_on_steps_from_capped_from_items(
    interleaved, small_windows, monkeypatch, capped_from_items, capped
):
    """``lns.max_window_share`` caps the windows of a step of at least ``lns.capped_from_items`` items
    (the 32-item step at 32) and leaves a smaller step's windows the pass's share (at 33)."""
    lns = small_windows.lns.model_copy(
        update={"max_window_share": 0.001, "capped_from_items": capped_from_items, "max_passes": 1}
    )
    profile = small_windows.model_copy(update={"lns": lns})
    limits = []
    solve_window = lns_module.joint_plan

    def recording(problem, profile_, incumbent, deadline, params, **kwargs):
        limits.append(params.deterministic_time_s)
        return solve_window(problem, profile_, incumbent, deadline, params, **kwargs)

    monkeypatch.setattr(lns_module, "joint_plan", recording)
    _lns(interleaved, profile)
    assert interleaved.num_items == 32 and limits
    cap = 0.001 * profile.time_budget_s
    assert all((limit == pytest.approx(cap)) is capped for limit in limits)


def test_a_pass_shares_its_limit_among_its_windows(interleaved, small_windows, monkeypatch):
    """Without a cap, a window's deterministic limit is what the pass has not yet used divided by the
    windows left in it, so the windows of a pass are given no more than the pass's limit in all (up to
    what the least window share adds) and the last window of a pass gets what the others left."""
    profile = small_windows.model_copy(
        update={"lns": small_windows.lns.model_copy(update={"max_window_share": None, "max_passes": 1})}
    )
    limits, used = [], []
    solve_window = lns_module.joint_plan

    def recording(problem, profile_, incumbent, deadline, params, **kwargs):
        limits.append(params.deterministic_time_s)
        plan, stats = solve_window(problem, profile_, incumbent, deadline, params, **kwargs)
        used.append(stats.deterministic_time or 0.0)
        return plan, stats

    monkeypatch.setattr(lns_module, "joint_plan", recording)
    work = profile.joint.share * profile.time_budget_s
    _, _ = _lns(interleaved, profile)[1]
    assert len(limits) >= 2
    assert limits[-1] == pytest.approx(
        max(work - sum(used[:-1]), profile.lns.min_window_share * profile.time_budget_s)
    )
    assert sum(limits[:-1]) <= work + 1e-9


def test_a_window_takes_the_lns_linearization_level():
    """A window's CP-SAT parameters take ``lns.linearization_level`` where it is set, else
    ``cpsat.linearization_level``."""
    base = cpplan.load_solver("deterministic")
    cpsat = base.cpsat.model_copy(update={"linearization_level": 2})
    for level, expected in ((0, 0), (None, 2)):
        lns = base.lns.model_copy(update={"linearization_level": level})
        profile = base.model_copy(update={"lns": lns, "cpsat": cpsat})
        assert lns_module._window_params(profile, 1.0, 2, capped=True).linearization_level == expected
