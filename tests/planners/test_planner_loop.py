"""The planner's loop: one budget shared by the stages, one pool of proposals passed to the deciding
stage whatever order the proposers ran in, and a complete hint where the ownership model needs one."""

from __future__ import annotations

import importlib

import pytest

import cpplan
import cpplan.cpsat.owned_solve as owned_solve
import cpplan.planners.portfolio as portfolio
from cpplan.plans.outcome import Scope, Status
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile, migrated_profile
from cpplan.spec.settings import Settings

cpsat_solve = importlib.import_module("cpplan.cpsat.solve")  # the package exports a function of that name
cpsat_planner = importlib.import_module("cpplan.planners.cpsat_planner")


@pytest.fixture(scope="module")
def problem(small_grpo, qwen36) -> Problem:
    """Eight GRPO items at CP4, 8 layers and 12 GiB per rank: several waves, CP-SAT decides."""
    settings = Settings(topology=cpplan.Topology(cp=4), model=qwen36, memory_bytes=12 * 2**30, num_layers=8)
    return Problem.build(small_grpo, settings)


def _with(profile: SolverProfile, **sections) -> SolverProfile:
    """``profile`` with the given fields of its sections replaced (``ownership={"hint": ...}``)."""
    update = {name: getattr(profile, name).model_copy(update=fields) for name, fields in sections.items()}
    return profile.model_copy(update=update)


def _limits_seen(monkeypatch) -> list[float | None]:
    """Record the deterministic time limit of every CP-SAT run of the joint and ownership models (the
    ownership model's helper solves included)."""
    seen: list[float | None] = []
    run = cpsat_solve.run_solver

    def recording(model, params, **kwargs):
        seen.append(params.deterministic_time_s)
        return run(model, params, **kwargs)

    monkeypatch.setattr(cpsat_solve, "run_solver", recording)
    monkeypatch.setattr(owned_solve, "run_solver", recording)
    return seen


@pytest.mark.parametrize("budget", [10.0, 4.0])
def test_each_cpsat_stage_takes_its_share_of_a_deterministic_budget(problem, monkeypatch, budget):
    """Under the deterministic profile the joint model's deterministic limit is ``joint.share`` times
    the budget and the ownership model's runs share ``ownership.share`` times it (its first run all but
    ``ownership.relaxation_share`` of that, a second run the rest only after an unproved answer) and its
    second pass ``ownership.reorder_share`` times it, so ``--time-budget`` scales them all; nothing else
    runs CP-SAT at one CP size."""
    seen = _limits_seen(monkeypatch)
    profile = cpplan.load_solver("deterministic").with_time_budget(budget)
    cpplan.solve(problem, profile)
    share, relax = profile.ownership.share * budget, profile.ownership.relaxation_share
    assert seen[:2] == [pytest.approx(profile.joint.share * budget), pytest.approx(share * (1 - relax))]
    rest = seen[3:] if seen[2:3] == [pytest.approx(share * relax)] else seen[2:]
    assert rest in ([], [pytest.approx(profile.ownership.reorder_share * budget)])


def test_the_ownership_model_takes_its_own_linearization_level(problem, monkeypatch):
    """The joint model runs with ``cpsat.linearization_level`` and the ownership model with
    ``ownership.linearization_level``, whatever ``[cpsat]`` says."""
    seen = []
    run = cpsat_solve.run_solver

    def recording(model, params, **kwargs):
        seen.append(params.linearization_level)
        return run(model, params, **kwargs)

    monkeypatch.setattr(cpsat_solve, "run_solver", recording)
    monkeypatch.setattr(owned_solve, "run_solver", recording)
    base = cpplan.load_solver("deterministic")
    for joint_level, own_level in ((1, 0), (2, 1)):
        seen.clear()
        profile = _with(
            base, cpsat={"linearization_level": joint_level}, ownership={"linearization_level": own_level}
        )
        cpplan.solve(problem, profile)
        assert seen[:2] == [joint_level, own_level]
        assert set(seen[2:]) <= {own_level}, "the second pass is the ownership model's"


def test_under_the_clock_the_bound_needs_timing_bound_min_left_s(problem):
    """Under the clock the bound over every plan is computed only with ``timing.bound_min_left_s`` of
    search time left: with 2 s of budget it is at a threshold of 0 s and is not at one of 100 s."""
    runtime = cpplan.load_solver("runtime").with_time_budget(2.0)
    scopes = {}
    for threshold in (0.0, 100.0):
        profile = _with(runtime, timing={"bound_min_left_s": threshold})
        scopes[threshold] = cpplan.solve(problem, profile).solver.bound_scope
    assert scopes[0.0] is Scope.ALL_PLANS and scopes[100.0] is not Scope.ALL_PLANS


def test_the_joint_stage_keeps_to_its_share_of_the_clock(problem, monkeypatch):
    """Under the clock the joint model is handed a deadline at most ``joint.share`` of the budget
    after it starts, and never past the time kept for the ownership stage."""
    profile = cpplan.load_solver("runtime").with_time_budget(2.0)
    handed: list[float] = []
    propose = cpsat_planner.joint_plan

    def recording(problem, profile, incumbent, deadline, params, **kwargs):
        handed.append(deadline.left_s())
        return propose(problem, profile, incumbent, deadline, params, **kwargs)

    monkeypatch.setattr(cpsat_planner, "joint_plan", recording)
    cpplan.solve(problem, profile)
    assert len(handed) == 1 and 0 < handed[0] <= profile.joint.share * profile.time_budget_s


def test_the_pool_does_not_depend_on_the_strategy_order(problem, monkeypatch):
    """The ownership model sees the same proposals, in the same order, whatever order the profile
    lists the strategies in, and the chosen plan is the same byte for byte."""
    pools: list[list[tuple[int, ...]]] = []
    decide = portfolio.decide

    def recording(problem, pool, budget, by):
        pools.append([(*(len(w.items) for w in plan.waves), round(plan.cost_s, 9)) for plan in pool.plans])
        return decide(problem, pool, budget, by)

    monkeypatch.setattr(portfolio, "decide", recording)
    default = cpplan.load_solver("deterministic")
    reordered = default.model_copy(update={"strategies": ("seeded", "cpsat", "full_sharing", "greedy")})
    first, second = (cpplan.solve(problem, profile) for profile in (default, reordered))
    assert len(pools) == 2 and pools[0] == pools[1] and len(pools[0]) >= 3
    assert plan_to_dict(problem, first.plan) == plan_to_dict(problem, second.plan)


def test_a_complete_hint_lets_the_ownership_model_answer_on_little_work(problem):
    """Without presolve and on a deterministic limit too small to search, the ownership model answers
    with a complete hint (every variable solved from the proposal's choices) and does not with the
    choices alone."""
    base = _with(cpplan.load_solver("deterministic"), cpsat={"presolve": "off"}, ownership={"share": 1e-3})
    outcome = {}
    for hint in ("choices", "complete"):
        result = cpplan.solve(problem, _with(base, ownership={"hint": hint}))
        outcome[hint] = result.solver.deciding
    assert outcome["choices"].model == outcome["complete"].model == "ownership"
    assert outcome["choices"].status is Status.UNKNOWN
    assert outcome["complete"].status.answered and outcome["complete"].bound_scope is Scope.PROPOSED_WAVES


def test_a_saved_profile_of_the_earlier_layout_reads_as_the_same_settings():
    """A profile saved with every CP-SAT setting under ``[cpsat]`` (and deterministic time limits in
    units), as an earlier planner state holds it, is read as the same settings in their stage's section,
    its limits as shares of its budget, and a key no setting stands for now is dropped."""
    earlier = SolverProfile.model_validate(
        migrated_profile(
            {
                "name": "old",
                "time_budget_s": 10.0,
                "deterministic": True,
                "cpsat": {
                    "max_items": 32,
                    "hint": False,
                    "deterministic_time_s": 2.0,
                    "ownership_columns": 4,
                    "ownership_deterministic_time_s": 0.5,
                },
                "timing": {"seeded_share": 0.25},
                "ownership": {"tighten_share": 0.5},
            }
        )
    )
    assert earlier.joint.max_items == 32 and earlier.joint.hint is False
    assert earlier.joint.share == pytest.approx(0.2) and earlier.ownership.share == pytest.approx(0.05)
    assert earlier.ownership.columns == 4 and earlier.seeded.share == 0.25
    assert earlier.schedule.max_items == 32


def test_an_ownership_run_without_answer_keeps_its_statistics(problem):
    """Where the ownership model gives no answer (no presolve, a limit too small to search, the choices
    alone hinted), the cheapest proposal is kept and the statistics are still that run's: its build and
    search stages and its model's size, the objective the last answering model's."""
    base = _with(cpplan.load_solver("deterministic"), cpsat={"presolve": "off"}, ownership={"share": 1e-3})
    stats = cpplan.solve(problem, _with(base, ownership={"hint": "choices"})).solver
    assert stats.deciding.model == "ownership" and stats.deciding.status is Status.UNKNOWN
    assert stats.deciding.kept.startswith("the cheapest proposal")
    assert {"ownership_build", "ownership_search"} <= set(stats.stage_s)
    joint = stats.outcomes[0]
    assert joint.model == "joint" and stats.objective_s == joint.objective_s == stats.answered.objective_s
    assert stats.num_constraints > 0 and stats.deterministic_time is not None


def test_a_proposer_error_is_recorded_as_failed(problem, monkeypatch):
    """An error raised while the joint model proposes is recorded as a failed run (not as skipped by
    rule), its detail naming the error; the ownership model still decides over the other proposals."""

    def raising(*args, **kwargs):
        raise cpplan.InputError("a broken joint model")

    monkeypatch.setattr(portfolio, "joint_proposal", raising)
    result = cpplan.solve(problem, cpplan.load_solver("deterministic"))
    joint = result.solver.outcomes[0]
    assert joint.model == "joint" and joint.status is Status.FAILED
    assert "InputError" in joint.detail and "failed" in joint.words()
    assert result.solver.deciding.model == "ownership" and result.solver.deciding.status.answered


@pytest.mark.parametrize("dp", [1, 2])
def test_the_seeded_proposer_is_not_run_above_its_max_items(dp):
    """A profile's ``seeded.max_items`` keeps the seeded proposer from running on a step with more
    items, on one CP group and on a pool of two: its candidate has no plan and says why; at or below
    the limit it plans."""
    from pathlib import Path

    workload = cpplan.Workload.from_jsonl(Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl")
    base = cpplan.load_solver("deterministic")
    reasons = {}
    for max_items in (len(workload.items) - 1, len(workload.items)):
        seeded = base.seeded.model_copy(update={"max_items": max_items})
        profile = base.model_copy(update={"seeded": seeded, "strategies": ("greedy", "seeded")})
        topology = cpplan.Topology(cp=1, dp=dp)
        result = cpplan.plan(
            workload, topology=topology, model="qwen3.6-35b-a3b", memory_bytes="8GiB", solver=profile
        )
        (candidate,) = [c for c in result.to_dict()["candidates"] if c["strategy"] == "seeded"]
        reasons[max_items] = (candidate["cost_s"], candidate["reason"])
    below, at = reasons[len(workload.items) - 1], reasons[len(workload.items)]
    assert below[0] is None and "above seeded.max_items" in below[1]
    assert at[0] is not None
