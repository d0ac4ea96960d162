"""The CP-SAT strategy: the joint wave / layout / ownership model of :mod:`cpplan.cpsat`, hinted with
the greedy plan, solved within what is left of the portfolio's deadline, realized and priced.

Stages (reported in ``SolverStats.stage_s``): ``build`` (decision space, model and hint), ``presolve``
and ``search`` (CP-SAT), ``realize`` (packing, chunk ownership and exact pricing of the solution); the
portfolio adds ``verify``. Without enough time left for a useful search the strategy is skipped and
says so in its status.
"""

from __future__ import annotations

import time

from ..cpsat import build_space, compile_model, realize, solve
from ..cpsat.model import CompiledModel, ModelValues
from ..cpsat.space import LayoutSpace
from ..problem import Problem
from ..profile import SolverProfile
from ..result import Plan, SolverStats
from .greedy import cached_greedy_plan

# Seconds kept back from the deadline for realizing and verifying the solution: a fixed part plus a
# part per logical token (measured by benchmarks/bench_planners.py on the 2-core machine).
MARGIN_S = 0.006
MARGIN_S_PER_TOKEN = 4e-8
# Below this much search time, CP-SAT is not started.
MIN_SEARCH_S = 0.005


def reserve_s(problem: Problem) -> float:
    """Seconds to keep for realizing and verifying a solution of ``problem``."""
    tokens = sum(item.num_tokens for item in problem.workload.items)
    return MARGIN_S + MARGIN_S_PER_TOKEN * tokens


def greedy_values(compiled: CompiledModel, space: LayoutSpace, plan: Plan) -> ModelValues:
    """The model's values of a greedy-style plan (items in ascending waves, one spec per wave)."""
    problem = compiled.problem
    assignment: list[tuple[int, int]] = [(0, 0)] * problem.num_items
    shared: set[tuple[int, int]] = set()
    for w, wave in enumerate(plan.waves):
        mask = problem.share_mask(wave.layout_name)
        for i in wave.items:
            assignment[i] = (w, space.items[i].layout_of(mask))
        shared.update((k, w) for k, node in enumerate(space.cross) if mask[node.node])
    return compiled.evaluate(assignment, shared)


def cpsat_planner(
    problem: Problem, profile: SolverProfile, deadline: float
) -> tuple[Plan | None, SolverStats]:
    """Registered as strategy ``cpsat``."""
    started = time.perf_counter()
    params = profile.cpsat
    if problem.num_items > params.max_items:
        return None, SolverStats(status=f"skipped: {problem.num_items} items > max_items {params.max_items}")
    reserve = reserve_s(problem)
    greedy = cached_greedy_plan(problem, profile.greedy.layouts)
    if any(wave.split for wave in greedy.waves):
        return None, SolverStats(status="skipped: the greedy plan splits an item (not modelled)")
    if not profile.deterministic and deadline - time.perf_counter() - reserve < MIN_SEARCH_S:
        return None, SolverStats(status="skipped: no time left", stage_s={"build": 0.0})
    space = build_space(problem, extra_specs=tuple(profile.greedy.layouts))
    compiled = compile_model(problem, space, greedy.num_waves + params.max_extra_waves)
    if params.hint:
        compiled.add_hint(greedy_values(compiled, space, greedy))
    build_s = time.perf_counter() - started
    left = deadline - time.perf_counter() - reserve
    if not profile.deterministic and left < MIN_SEARCH_S:
        return None, SolverStats(status="skipped: no time left", stage_s={"build": build_s})
    result = solve(compiled, params, time_limit_s=left, deterministic=profile.deterministic, build_s=build_s)
    stage_s = dict(result.stage_s)
    plan = None
    if result.solution is not None:
        t0 = time.perf_counter()
        plan = realize(problem, space, compiled.memory, result.solution)
        stage_s["realize"] = time.perf_counter() - t0
    stats = SolverStats(
        status=result.status,
        objective_s=result.objective_s,
        bound_s=result.bound_s,
        gap=result.gap,
        wall_s=time.perf_counter() - started,
        deterministic_time=result.deterministic_time,
        num_booleans=result.num_booleans,
        num_integers=result.num_integers,
        num_constraints=result.num_constraints,
        ortools_version=result.ortools_version,
        stage_s=stage_s,
    )
    return plan, stats
