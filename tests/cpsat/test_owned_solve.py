"""Solving the ownership model: its helper solves (completing a hint, the slack-free re-solve) run on
copies, with the profile's CP-SAT parameters, and its memory rows take the model's scaling."""

from __future__ import annotations

from pathlib import Path

from ortools.sat.python import cp_model

from cpplan.api import build_problem
from cpplan.cpsat.owned_model import compile_owned, pool_columns
from cpplan.cpsat.owned_solve import hint_plan, solve_owned
from cpplan.cpsat.scaling import FINE_SCALING, KIB, Scaling
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.spec.profile import load_solver
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl"
PROFILE = load_solver("deterministic")


def _owned(cp: int = 4, scaling: Scaling = FINE_SCALING):
    workload = Workload.from_jsonl(EXAMPLE)
    problem = build_problem(workload, topology=Topology(cp=cp), model="qwen3.6-35b-a3b", memory_bytes="8GiB")
    plan = cached_greedy_plan(problem, PROFILE.greedy.layouts)
    columns = pool_columns(problem, [plan.waves], max_free=8)
    return problem, plan, compile_owned(problem, columns, window_chunks=16, scaling=scaling)


def test_solving_leaves_the_model_as_built():
    """After the ownership model is solved (its answer re-solved with its choices fixed, to report a
    slack-free objective), the model has the constraints and the hint it was built and hinted with:
    the re-solve runs on a copy."""
    _, plan, owned = _owned()
    assert hint_plan(owned, plan.waves, complete_work=1.0, params=PROFILE.cpsat)
    before = (len(owned.model.proto.constraints), list(owned.model.proto.solution_hint.values))
    answer = solve_owned(owned, PROFILE.cpsat, time_limit_s=None, deterministic=True)
    assert answer.plan is not None
    assert (len(owned.model.proto.constraints), list(owned.model.proto.solution_hint.values)) == before


def test_every_solve_takes_the_profile_parameters(monkeypatch):
    """Completing the hint and the search both run with the profile's seed, workers and linear
    relaxation (none with CP-SAT's defaults); the search with its presolve effort, the helper solve
    (its choices fixed) with full presolve, which all but solves it."""
    seen = []
    solve = cp_model.CpSolver.solve

    def recording(self, model, *args, **kwargs):
        p = self.parameters
        seen.append((p.random_seed, p.num_workers, p.cp_model_presolve, p.linearization_level))
        return solve(self, model, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", recording)
    update = {
        "random_seed": 7,
        "num_workers": 2,
        "presolve": "off",
        "deterministic_time_s": 1.0,
        "linearization_level": 0,
    }
    params = PROFILE.cpsat.model_copy(update=update)
    _, plan, owned = _owned()
    assert hint_plan(owned, plan.waves, complete_work=1.0, params=params)
    answer = solve_owned(owned, params, time_limit_s=None, deterministic=True)
    assert answer.plan is not None
    assert seen == [(7, 2, True, 0), (7, 2, False, 0)]


def test_memory_rows_take_the_model_scaling():
    """The ownership model's memory rows are written in its scaling's memory unit: with 2 KiB units
    instead of KiB (and the same time unit) its enforced rows' right-hand sides shrink (the memory
    rows are the only rows that read the memory unit)."""
    coarse = Scaling(bytes_per_unit=2 * KIB, seconds_per_unit=FINE_SCALING.seconds_per_unit)
    rows = []
    for scaling in (FINE_SCALING, coarse):
        _, _, owned = _owned(cp=2, scaling=scaling)
        domains = [list(c.linear.domain) for c in owned.model.proto.constraints if c.enforcement_literal]
        rows.append(sum(d[-1] for d in domains if len(d) == 2 and d[0] == cp_model.INT_MIN))
    assert 0 < rows[1] < 0.75 * rows[0]


def _solves(monkeypatch) -> list[tuple[int, int]]:
    """Record every CP-SAT run: its linear relaxation level and how many variables it had hinted."""
    seen = []
    solve = cp_model.CpSolver.solve

    def recording(self, model, *args, **kwargs):
        seen.append((self.parameters.linearization_level, len(model.proto.solution_hint.vars)))
        return solve(self, model, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", recording)
    return seen


def test_an_unproved_answer_is_searched_on_with_the_relaxation(monkeypatch):
    """With ``relaxed`` parameters, an answer not proved optimal (the README example at CP4 after 0.01
    units without the relaxation) is searched on by a second run with the linear relaxation, hinted
    with the whole first answer, on a copy of the model; the answer kept is never dearer in the model
    than the first run's."""
    first = PROFILE.cpsat.model_copy(update={"deterministic_time_s": 0.01, "linearization_level": 0})
    relaxed = PROFILE.cpsat.model_copy(update={"deterministic_time_s": 0.5, "linearization_level": 1})
    _, plan, owned = _owned(cp=4)
    hint_plan(owned, plan.waves)
    alone = solve_owned(owned, first, time_limit_s=None, deterministic=True)
    assert alone.stats.status == "feasible"
    hinted = len(owned.model.proto.solution_hint.vars)
    seen = _solves(monkeypatch)
    answer = solve_owned(owned, first, time_limit_s=None, deterministic=True, relaxed=relaxed)
    assert [level for level, _ in seen] == [0, 1]
    assert seen[1][1] == len(owned.model.proto.variables) > hinted
    assert len(owned.model.proto.solution_hint.vars) == hinted, "the model itself keeps its hint"
    assert answer.stats.objective_s <= alone.stats.objective_s
    assert answer.plan.cost_s <= alone.plan.cost_s


def test_a_proved_answer_is_not_searched_on(monkeypatch):
    """An answer proved optimal by the first run is kept without a second run."""
    first = PROFILE.cpsat.model_copy(update={"deterministic_time_s": 1.0, "linearization_level": 0})
    _, plan, owned = _owned(cp=2)
    hint_plan(owned, plan.waves)
    seen = _solves(monkeypatch)
    answer = solve_owned(owned, first, time_limit_s=None, deterministic=True, relaxed=first)
    assert answer.stats.status == "optimal" and len(seen) == 1


def test_a_run_without_an_answer_searches_on_with_the_relaxation(monkeypatch):
    """Where the first run finds no answer in its share (the README example at CP4 after a
    deterministic limit too small for any), the relaxed parameters search the model again for the rest
    of the share, and that run's answer is the model's."""
    first = PROFILE.cpsat.model_copy(update={"deterministic_time_s": 1e-6, "linearization_level": 0})
    relaxed = PROFILE.cpsat.model_copy(update={"deterministic_time_s": 0.5, "linearization_level": 1})
    _, plan, owned = _owned(cp=4)
    hint_plan(owned, plan.waves)
    alone = solve_owned(owned, first, time_limit_s=None, deterministic=True)
    assert alone.plan is None and alone.stats.status == "unknown"
    seen = _solves(monkeypatch)
    answer = solve_owned(owned, first, time_limit_s=None, deterministic=True, relaxed=relaxed)
    assert [level for level, _ in seen] == [0, 1]
    assert answer.plan is not None and answer.stats.status in ("feasible", "optimal")
