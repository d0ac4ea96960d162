"""Solving a compiled model: parameters from a profile; the solution and the run's statistics."""

from __future__ import annotations

import functools
import math
import os
import re
import time
from dataclasses import dataclass

import ortools
from ortools.sat.python import cp_model

from cpplan.cpsat.joint_model import CompiledModel
from cpplan.plans.outcome import ModelOutcome, Scope, Status
from cpplan.plans.plan import SolverStats
from cpplan.spec.profile import CpSatParams

STATUSES = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
    cp_model.MODEL_INVALID: Status.MODEL_INVALID,
}
"""CP-SAT's statuses as typed outcomes (every model alike)."""
_SEARCH_START = re.compile(r"Starting search at ([0-9.]+)s")


@dataclass(frozen=True, kw_only=True)
class Solution:
    """What the solver chose: per item ``(wave, layout)``, shared cross nodes ``(k, w)``, per-wave chunk
    caps, and per wave the exact column it takes (``None``: none; empty: no wave takes one)."""

    assignment: tuple[tuple[int, int], ...]
    shared: frozenset[tuple[int, int]]
    cap: tuple[int, ...]
    columns: tuple[int | None, ...] = ()

    def column(self, wave: int) -> int | None:
        """The exact column wave ``wave`` takes, or ``None``."""
        return self.columns[wave] if self.columns else None


def model_size(model: cp_model.CpModel) -> tuple[int, int, int]:
    """Booleans, other integer variables and constraints of a model."""
    proto = model.proto
    booleans = sum(1 for v in proto.variables if list(v.domain) == [0, 1])
    return booleans, len(proto.variables) - booleans, len(proto.constraints)


def parameters(
    params: CpSatParams, *, time_limit_s: float | None, deterministic: bool, log: bool = True
) -> dict:
    """CP-SAT parameters of a profile: workers, seed, presolve effort, gap and time limits; with ``log``
    the search log in the response (where :func:`solve` reads the presolve time)."""
    workers = params.num_workers or (os.cpu_count() or 1)
    values: dict = {
        "num_workers": workers,
        "random_seed": params.random_seed,
        "relative_gap_limit": params.relative_gap_limit,
        "linearization_level": params.linearization_level,
        "log_search_progress": log,
        "log_to_stdout": False,
        "log_to_response": log,
    }
    if params.presolve == "off":
        values["cp_model_presolve"] = False
    elif params.presolve == "light":
        values["max_presolve_iterations"] = 1
        values["cp_model_probing_level"] = 0
    if deterministic:
        values["interleave_search"] = workers > 1
        if params.deterministic_time_s is not None:
            values["max_deterministic_time"] = params.deterministic_time_s
    if time_limit_s is not None and math.isfinite(time_limit_s) and not deterministic:
        values["max_time_in_seconds"] = max(time_limit_s, 1e-3)
    return values


def solve(
    compiled: CompiledModel,
    params: CpSatParams,
    *,
    time_limit_s: float | None,
    deterministic: bool = False,
    build_s: float = 0.0,
    model: str = "joint",
) -> tuple[Solution | None, SolverStats]:
    """Run CP-SAT on ``compiled``: the solution (``None`` when there is none, or it was rejected) and the
    run's statistics (``wall_s`` the solver's; objective, bound and gap the model's; ``deterministic``: no
    wall-clock limit, so the same answer on any machine). Stages: ``build`` (passed in), ``presolve`` and
    ``search`` (from the solver's log), ``verify``: the answer re-evaluated by :meth:`CompiledModel.evaluate`,
    which must pass every memory row and price no higher than the solver's objective, else it is rejected."""
    solver, status, wall = run_solver(
        compiled.model, params, time_limit_s=time_limit_s, deterministic=deterministic
    )
    match = _SEARCH_START.search(solver.response_proto.solve_log)
    presolve = min(float(match.group(1)), wall) if match else 0.0
    scaling = compiled.space.scaling
    name = STATUSES.get(status, Status.UNKNOWN)
    detail = ""
    solution = None
    objective = bound = None
    verify_s = 0.0
    if name.answered:
        objective = scaling.seconds(solver.objective_value)
        bound = scaling.seconds(solver.best_objective_bound)
        solution = _solution(compiled, solver)
        t0 = time.perf_counter()
        passes = re_evaluate(compiled, solution, objective)
        verify_s = time.perf_counter() - t0
        if not passes:
            name, solution = Status.UNKNOWN, None
            detail = "its answer was rejected: it fails the plain-Python re-evaluation"
    stage_s = {
        "build": build_s,
        "presolve": presolve,
        "search": max(0.0, wall - presolve),
        "verify": verify_s,
    }
    outcome = ModelOutcome(
        model=model,
        status=name,
        objective_s=objective if solution is not None else None,
        bound_s=bound if solution is not None else None,
        bound_scope=Scope.MODEL if solution is not None else None,
        detail=detail,
    )
    stats = run_stats(compiled.model, solver, outcome, wall, stage_s)
    return solution, stats


def run_solver(
    model: cp_model.CpModel,
    params: CpSatParams,
    *,
    time_limit_s: float | None,
    deterministic: bool,
    log: bool = True,
) -> tuple[cp_model.CpSolver, int, float]:
    """CP-SAT run on ``model`` with a profile's parameters: the solver, its status and wall seconds. The
    one place the planner runs CP-SAT (every model, and every helper solve of one)."""
    solver = cp_model.CpSolver()
    values = parameters(params, time_limit_s=time_limit_s, deterministic=deterministic, log=log)
    for name, value in values.items():
        setattr(solver.parameters, name, value)
    started = time.perf_counter()
    status = solver.solve(model)
    return solver, status, time.perf_counter() - started


def run_on_work(model: cp_model.CpModel, params: CpSatParams, work: float) -> tuple[cp_model.CpSolver, int]:
    """A helper solve of ``model``, a model whose choices are fixed (completing a hint), with the profile's
    workers and seed, stopped by ``work`` units of deterministic time alone, never the clock (the same answer
    on a busy machine). It presolves fully and stops only at optimality whatever the profile says of the
    search: with the choices fixed, presolve all but solves the model (a few milliseconds), where the search
    alone can spend the whole limit and still leave slack. The solver and its status."""
    limited = params.model_copy(
        update={"deterministic_time_s": work, "presolve": "full", "relative_gap_limit": 0.0}
    )
    solver, status, _ = run_solver(model, limited, time_limit_s=None, deterministic=True, log=False)
    return solver, status


@functools.cache
def warm_up() -> None:
    """Solve a one-variable model once per process, so that no planning budget pays for CP-SAT's
    first-call set-up."""
    model = cp_model.CpModel()
    model.add(model.new_bool_var("x") >= 0)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.solve(model)


def run_stats(
    model: cp_model.CpModel,
    solver: cp_model.CpSolver,
    outcome: ModelOutcome,
    wall_s: float,
    stage_s: dict[str, float],
) -> SolverStats:
    """The run's statistics: ``outcome`` says how it ended, and its objective, bound and gap are the
    ones reported."""
    booleans, integers, constraints = model_size(model)
    return SolverStats(
        outcomes=(outcome,),
        objective_s=outcome.objective_s,
        bound_s=outcome.bound_s,
        bound_scope=outcome.bound_scope,
        gap=outcome.gap,
        wall_s=wall_s,
        deterministic_time=float(solver.response_proto.deterministic_time),
        num_booleans=booleans,
        num_integers=integers,
        num_constraints=constraints,
        ortools_version=ortools.__version__,
        stage_s=stage_s,
    )


def re_evaluate(compiled: CompiledModel, solution: Solution, objective_s: float) -> bool:
    """Whether ``solution``, evaluated in plain Python (:meth:`CompiledModel.evaluate`), passes every
    memory row and prices no higher than the solver's objective ``objective_s``."""
    values = compiled.evaluate(solution.assignment, set(solution.shared), solution.columns or None)
    return bool(values.feasible) and not compiled.space.scaling.seconds(values.objective) > objective_s + 1e-9


def _solution(compiled: CompiledModel, solver: cp_model.CpSolver) -> Solution:
    columns: list[int | None] = [None] * compiled.num_waves
    by_column: dict[int, tuple[int, int]] = {}
    for (w, g), var in compiled.column_vars.take.items():
        if solver.boolean_value(var):
            columns[w] = g
            by_column.update((i, (w, 0)) for i in compiled.columns[g].items)
    assignment = []
    for i, rows in enumerate(compiled.waves.x):
        chosen = [
            (w, j) for w, row in enumerate(rows) for j, var in enumerate(row) if solver.boolean_value(var)
        ]
        if i in by_column:
            chosen.append(by_column[i])
        assert len(chosen) == 1
        assignment.append(chosen[0])
    lay = compiled.layout
    shared = frozenset(
        (k, w)
        for k in range(len(compiled.space.cross))
        for w in range(compiled.num_waves)
        if lay.s[k][w] is not None and solver.boolean_value(lay.s[k][w])
    )
    cap = tuple(int(solver.value(v)) for v in compiled.ownership.cap)
    return Solution(assignment=tuple(assignment), shared=shared, cap=cap, columns=tuple(columns))
