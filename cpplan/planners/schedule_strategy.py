"""The CP-SAT strategy where a plan's waves share a pool of CP groups (``dp > 1`` or dynamic CP): the
schedule model of :mod:`cpplan.cpsat.schedule_model` over every placement unit of the greedy pool plan
(:func:`~cpplan.planners.dynamic_cp.cached_dynamic_plan`, or the hint handed in), whose alternatives are
its own waves and its items repacked at every other group size they fit (:func:`alternatives`), warm
started from that plan, solved within the schedule stage's share and realized by replay.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from cpplan.cpsat.schedule_model import Job, add_hint, compile_schedule, hint_placements, solve_schedule
from cpplan.errors import NoFitError
from cpplan.planners.budget import Budget
from cpplan.planners.cpsat_strategy import not_run, reserve_s
from cpplan.planners.deadline import Deadline
from cpplan.planners.dynamic_cp import cached_dynamic_plan, group_sizes, packed_waves, pool_padding_s
from cpplan.plans.outcome import Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.plans.pool_schedule import units
from cpplan.pricing.problem import Problem, group_problem
from cpplan.pricing.wave import WavePlan
from cpplan.spec.profile import SolverProfile


def jobs_of(waves: Sequence[WavePlan]) -> tuple[Job, ...]:
    """Waves as jobs: a split item's consecutive waves one job, every other wave its own."""
    split_items = [w.items[0] if w.split else None for w in waves]
    return tuple(Job(waves=tuple(waves[i] for i in unit)) for unit in units(split_items))


def alternatives(
    problem: Problem, plan: Plan, layouts: Sequence[str], allowed: Sequence[int] | None = None
) -> list[list[tuple[Job, ...]]]:
    """Per placement unit of ``plan`` (in plan order), its own jobs first, then its items repacked at
    every group size where each of them fits, in the widest waves and in waves of at most half its
    tokens (distinct alternatives only)."""
    found = []
    for unit in jobs_of(plan.waves):
        items = sorted({i for w in unit.waves for i in w.items})
        half = -(-problem.logical_tokens(items) // 2)
        alts = [(unit,)]
        for size in group_sizes(problem, allowed):
            for cap in (None, half):
                try:
                    jobs = jobs_of(packed_waves(group_problem(problem, size), items, layouts, max_tokens=cap))
                except NoFitError:
                    break
                if all(_key(jobs) != _key(alt) for alt in alts):
                    alts.append(jobs)
        found.append(alts)
    return found


def _key(jobs: Sequence[Job]) -> tuple:
    """What makes two alternatives the same: their waves' items and group sizes."""
    return tuple((w.items, w.cp) for job in jobs for w in job.waves)


def dynamic_cpsat_planner(
    problem: Problem,
    profile: SolverProfile,
    deadline: Deadline,
    *,
    allowed: Sequence[int] | None = None,
    hint: Plan | None = None,
) -> tuple[Plan | None, SolverStats]:
    """Registered as strategy ``cpsat`` when the pool holds several groups: the schedule model over the group
    sizes in ``allowed`` (default: all), warm-started from ``hint`` (default: the greedy dynamic plan)."""
    started = time.perf_counter()
    budget = Budget.start(problem, profile, deadline)
    params, limit = budget.cpsat_params(profile.schedule.share), profile.schedule.max_items
    if problem.num_items > limit:
        why = f"{problem.num_items} items > schedule.max_items {limit}"
        return None, not_run("schedule", Status.SKIPPED, why, 0.0)
    search_by = deadline.less(reserve_s(problem, profile.timing))
    greedy = hint or cached_dynamic_plan(problem, profile.greedy.layouts, deadline=deadline)
    if search_by.left_s() < profile.timing.min_search_s:
        return None, not_run("schedule", Status.NO_TIME, build_s=0.0)
    alts = alternatives(problem, greedy, profile.greedy.layouts, allowed)
    compiled = compile_schedule(alts, problem.topology.pool, pool_padding_s(problem))
    if profile.joint.hint:
        add_hint(compiled, hint_placements(alts, greedy))
    build_s = time.perf_counter() - started
    left = search_by.left_s()
    if left < profile.timing.min_search_s:
        return None, not_run("schedule", Status.NO_TIME, build_s=build_s)
    plan, stats = solve_schedule(compiled, params, time_limit_s=left, deterministic=profile.deterministic)
    stage_s = {"build": build_s, **stats.stage_s}
    return plan, replace(stats, wall_s=time.perf_counter() - started, stage_s=stage_s)
