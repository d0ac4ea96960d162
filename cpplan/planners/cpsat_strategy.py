"""The joint model as the CP-SAT proposer: the wave / layout model of :mod:`cpplan.cpsat` with an
incumbent plan's waves as exact columns and complete hint, solved within its stage's deadline
(:func:`joint_plan`), realized and priced; so the incumbent is always a solution of the model. Stages
reported: ``build``, ``presolve``, ``search``, ``verify`` and ``realize``; without the time to build and
search (:meth:`~cpplan.spec.profile.TimingParams.joint_needs_s`) it is not run (``no_time``).
:func:`ensure_solver` warms CP-SAT up once per process, before any budget starts.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from cpplan.errors import InputError
from cpplan.planners.deadline import Deadline
from cpplan.plans.outcome import ModelOutcome, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import CpSatParams, SolverProfile, TimingParams

if TYPE_CHECKING:  # OR-Tools is imported where the model is built, so `import cpplan` stays light
    from cpplan.cpsat.columns import Column
    from cpplan.cpsat.joint_model import CompiledModel, ModelValues
    from cpplan.cpsat.space import LayoutSpace


def ensure_solver() -> None:
    """Import OR-Tools' CP-SAT and the joint model's modules and solve a one-variable model, once per
    process (:func:`cpplan.cpsat.solve.warm_up`): callers do it before a deadline starts, so no planning
    budget pays for the import or the solver's first-call set-up."""
    from cpplan.cpsat.solve import warm_up

    warm_up()


def reserve_s(problem: Problem, timing: TimingParams) -> float:
    """Seconds to keep for realizing a solution of ``problem`` (the profile's ``[timing]`` estimates)."""
    return timing.realize_reserve_s(problem.logical_tokens(range(problem.num_items)))


def plan_columns(problem: Problem, space: LayoutSpace, num_waves: int, *plans: Plan) -> tuple[Column, ...]:
    """The waves of ``plans`` (each fits: every strategy prices its waves exactly) as exact columns."""
    from cpplan.cpsat.columns import make_columns

    return make_columns((plan.waves for plan in plans), space.scaling, problem.memory_bytes, num_waves)


def greedy_values(
    compiled: CompiledModel, space: LayoutSpace, plan: Plan, *, as_columns: bool = True
) -> ModelValues:
    """The model's values of a greedy-style plan (items in ascending waves, one spec per wave). With
    ``as_columns`` each wave takes the exact column with its items where the model has one; without,
    the plan is judged by the conservative rows alone."""
    from cpplan.cpsat.columns import columns_with_items

    problem = compiled.problem
    assignment: list[tuple[int, int]] = [(0, 0)] * problem.num_items
    shared: set[tuple[int, int]] = set()
    taken: list[int | None] = [None] * compiled.num_waves
    for w, wave in enumerate(plan.waves):
        mask = _share_mask(problem, wave.layout_name)
        for i in wave.items:
            assignment[i] = (w, space.items[i].layout_of(mask))
        shared.update((k, w) for k, node in enumerate(space.cross) if mask[node.node])
        found = columns_with_items(compiled.columns, wave.items) if as_columns else []
        taken[w] = next((g for g in found if w in compiled.columns[g].slots), None)
    return compiled.evaluate(assignment, shared, taken)


def _share_mask(problem: Problem, name: str) -> np.ndarray:
    """The share mask of a layout spec; none shared for a wave named otherwise (a realized ``cpsat``
    wave: in the hint it only ever stands as an exact column, whose sharing the model ignores)."""
    try:
        return problem.share_mask(name)
    except InputError:
        return np.zeros(problem.tree.num_nodes, dtype=bool)


def compile_for(problem: Problem, profile: SolverProfile, greedy: Plan) -> tuple[LayoutSpace, CompiledModel]:
    """The decision space and the joint model for ``problem``: the greedy plan's (or any incumbent
    plan's) wave count, and its waves as exact columns."""
    from cpplan.cpsat import build_space, compile_model

    space = build_space(problem, extra_specs=tuple(profile.greedy.layouts))
    num_waves = greedy.num_waves
    return space, compile_model(problem, space, num_waves, plan_columns(problem, space, num_waves, greedy))


def joint_plan(
    problem: Problem,
    profile: SolverProfile,
    incumbent: Plan,
    deadline: Deadline,
    params: CpSatParams,
    *,
    model: str = "joint",
) -> tuple[Plan | None, SolverStats]:
    """The joint model of ``problem`` with ``incumbent``'s waves (none split; taken in order of their
    lowest item) as exact columns and, taken as them, the complete hint; solved with ``params`` (its
    stage's deterministic limit in them) until ``deadline`` less :func:`reserve_s`, realized and
    priced. Not run (its outcome says so) when too little time is left to build the model and search
    it; ``model`` names the run in its outcome (``lns`` for a window of the window search)."""
    from cpplan.cpsat import realize, solve

    started = time.perf_counter()
    incumbent = Plan(
        strategy=incumbent.strategy, waves=tuple(sorted(incumbent.waves, key=lambda w: min(w.items)))
    )
    timing = profile.timing
    search_by = deadline.less(reserve_s(problem, timing))
    if not search_by.can_finish(timing.joint_needs_s(problem.num_items)):
        return None, not_run(model, Status.NO_TIME, build_s=0.0)
    space, compiled = compile_for(problem, profile, incumbent)
    if profile.joint.hint:
        compiled.add_hint(greedy_values(compiled, space, incumbent))
    build_s = time.perf_counter() - started
    left = search_by.left_s()
    if left < timing.min_search_s:
        return None, not_run(model, Status.NO_TIME, build_s=build_s)
    solution, stats = solve(
        compiled, params, time_limit_s=left, deterministic=profile.deterministic, build_s=build_s, model=model
    )
    stage_s = dict(stats.stage_s)
    plan = None
    if solution is not None:
        t0 = time.perf_counter()
        plan = realize(problem, space, solution, columns=compiled.columns)
        stage_s["realize"] = time.perf_counter() - t0
    return plan, replace(stats, wall_s=time.perf_counter() - started, stage_s=stage_s)


def not_run(model: str, status: Status, detail: str = "", build_s: float | None = None) -> SolverStats:
    """The statistics of a model run that did not search: its outcome, and its build seconds when given."""
    stage_s = {} if build_s is None else {"build": build_s}
    return SolverStats(outcomes=(ModelOutcome(model=model, status=status, detail=detail),), stage_s=stage_s)
