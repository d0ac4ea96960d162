"""Large-neighbourhood search: the joint model re-solves a few adjacent waves at a time.

Above ``joint.max_items`` the CP-SAT proposer improves the greedy plan window by window: a window is one
to ``lns.window_waves`` adjacent waves (at most ``lns.window_items_per_max_items`` × ``joint.max_items``
items, none split), solved as a sub-problem (:class:`~cpplan.planners.subproblem.SubProblem`) by
:func:`~cpplan.planners.cpsat_strategy.joint_plan` with its waves as exact columns and hint; the answer
replaces the window only when the independent verifier accepts it and prices it lower. Windows overlap
by one wave; passes repeat while one improves and time is left. Each window gets an equal share of the
time left for the pass; under a deterministic deadline every window of every pass runs.
"""

from __future__ import annotations

import time
from collections import Counter

from cpplan.errors import CpplanError
from cpplan.planners.cpsat_strategy import joint_plan
from cpplan.planners.deadline import Deadline, verify_reserve_s
from cpplan.planners.subproblem import SubProblem
from cpplan.plans.outcome import ModelOutcome, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan
from cpplan.spec.profile import CpSatParams, SolverProfile, TimingParams
from cpplan.verifier.plan_check import verify_plan


def lns_plan(
    problem: Problem, profile: SolverProfile, incumbent: Plan, deadline: Deadline, work: float | None
) -> tuple[Plan | None, SolverStats]:
    """``incumbent`` improved window by window (``None`` when no window improved), each pass sharing
    the deterministic limit ``work`` (``None``: the clock decides) among its windows; the outcome's
    detail counts the windows solved, improved and proved optimal in their model."""
    started = time.perf_counter()
    waves, tally = list(incumbent.waves), Counter()
    limit = profile.lns.window_items_per_max_items * profile.joint.max_items
    for _ in range(profile.lns.max_passes):
        improved = _one_pass(problem, profile, waves, limit, deadline, work, tally)
        if not improved or deadline.left_s() < profile.timing.min_search_s:
            break
    status = Status.FEASIBLE if tally["improved"] else Status.UNKNOWN
    if not tally["solved"]:
        status = Status.NO_TIME
    outcome = ModelOutcome(model="lns", status=status, detail=_tally_words(tally))
    stats = SolverStats(outcomes=(outcome,), wall_s=time.perf_counter() - started, stage_s=_stages(tally))
    if not tally["improved"]:
        return None, stats
    return Plan(strategy="cpsat", waves=tuple(waves)), stats


def _one_pass(
    problem: Problem,
    profile: SolverProfile,
    waves: list[WavePlan],
    limit: int,
    deadline: Deadline,
    work: float | None,
    tally: Counter,
) -> bool:
    """One sweep of overlapping windows over ``waves`` (replaced in place); whether any improved. Under a
    deterministic limit ``work`` each window gets an equal share of what the pass has not yet used."""
    improved, start, spent = False, 0, tally["work"]
    depth = profile.lns.window_waves
    while start < len(waves):
        size = _window_at(waves, start, limit, depth)
        if not size:
            start += 1
            continue
        left = _windows_left(waves, start, limit, depth)
        work_left = None if work is None else work - (tally["work"] - spent)
        params = _window_params(
            profile, work_left, left, capped=problem.num_items >= profile.lns.capped_from_items
        )
        better = _solve_window(problem, profile, waves[start : start + size], deadline, left, params, tally)
        if better is not None:
            waves[start : start + size] = better
            improved, size = True, len(better)
        if deadline.left_s() < profile.timing.min_search_s:
            break
        start = _advance(start, size, len(waves))
    return improved


def _advance(start: int, size: int, num_waves: int) -> int:
    """Where the next window starts: on the last wave of a window of several (windows overlap by one
    wave, so items can travel along the plan), after a window of one or one that reaches the end."""
    return start + size if size == 1 or start + size >= num_waves else start + size - 1


def _window_at(waves: list[WavePlan], start: int, limit: int, depth: int) -> int:
    """How many waves the widest window from ``start`` holds: up to ``depth`` waves within ``limit``
    items and without a split wave, or the wave alone when the next one does not fit with it (0 when the
    wave itself is split or over the limit)."""
    size, items = 0, 0
    for wave in waves[start : start + depth]:
        if wave.split or items + len(wave.items) > limit:
            break
        size, items = size + 1, items + len(wave.items)
    return size


def _windows_left(waves: list[WavePlan], start: int, limit: int, depth: int) -> int:
    """How many windows this pass still has from ``start`` on (for sharing out the time)."""
    count, at = 0, start
    while at < len(waves):
        size = _window_at(waves, at, limit, depth)
        count += size > 0
        at = _advance(at, size, len(waves)) if size else at + 1
    return max(1, count)


def _solve_window(
    problem: Problem,
    profile: SolverProfile,
    window: list[WavePlan],
    deadline: Deadline,
    windows_left: int,
    params: CpSatParams,
    tally: Counter,
) -> list[WavePlan] | None:
    """The window's waves re-solved by the joint model, when verified and cheaper; else ``None``."""
    t0 = time.perf_counter()
    items = sum(len(wave.items) for wave in window)
    step_by = _window_deadline(deadline, windows_left, items, profile.timing)
    if step_by is None:
        tally["unaffordable"] += 1
        return None
    try:
        sub = SubProblem.of(problem, [i for wave in window for i in wave.items])
    except CpplanError:  # say, fewer packed tokens than CP ranks: leave the window as it is
        return None
    incumbent = Plan(strategy="cpsat", waves=tuple(sub.from_parent(wave) for wave in window))
    step_by = step_by.less(verify_reserve_s(sub.problem, profile.timing))
    tally["build_s"] += time.perf_counter() - t0
    try:
        plan, stats = joint_plan(sub.problem, profile, incumbent, step_by, params, model="lns")
    except CpplanError:
        return None
    _count(stats, tally)
    tally["work"] += stats.deterministic_time or 0.0
    if plan is None or not plan.cost_s < incumbent.cost_s * (1 - 1e-9):
        tally["proved"] += plan is not None and stats.status == Status.OPTIMAL
        return None
    t1 = time.perf_counter()
    verdict = verify_plan(
        plan_to_dict(sub.problem, plan), sub.problem.workload, sub.problem.card, sub.problem.memory_bytes
    )
    tally["verify_s"] += time.perf_counter() - t1
    if not verdict.valid or not verdict.cost_s < incumbent.cost_s * (1 - 1e-9):
        tally["rejected"] += 1
        return None
    tally["improved"] += 1
    return [sub.to_parent(wave) for wave in plan.waves]


def _window_params(
    profile: SolverProfile, work_left: float | None, windows_left: int, *, capped: bool
) -> CpSatParams:
    """CP-SAT's parameters for a window: the deterministic time the pass has left, ``work_left``, divided
    by the windows left in it, at least ``lns.min_window_share`` of the budget and, when ``capped``, at
    most ``lns.max_window_share`` of it; under the clock (``work_left`` is ``None``), none."""
    share = None
    if work_left is not None:
        share = max(work_left / windows_left, profile.lns.min_window_share * profile.time_budget_s)
        if capped and profile.lns.max_window_share is not None:
            share = min(share, profile.lns.max_window_share * profile.time_budget_s)
    level = profile.lns.linearization_level
    level = profile.cpsat.linearization_level if level is None else level
    return profile.cpsat.model_copy(update={"deterministic_time_s": share, "linearization_level": level})


def _window_deadline(
    deadline: Deadline, windows_left: int, items: int, timing: TimingParams
) -> Deadline | None:
    """The window's deadline: its equal share of the time left, or all of it when the share cannot
    build and search its model but the whole can (one window solved beats none); ``None`` when not
    even the whole can."""
    needed = timing.joint_needs_s(items)
    share = deadline.share(1.0 / windows_left)
    if share.can_finish(needed):
        return share
    return deadline if deadline.can_finish(needed) else None


def _count(stats: SolverStats, tally: Counter) -> None:
    """Add one CP-SAT run's statistics to the tally."""
    if stats.status == Status.NO_TIME:
        tally["skipped"] += 1
        return
    tally["solved"] += 1
    for stage, seconds in stats.stage_s.items():
        tally[f"{stage}_s"] += seconds


def _tally_words(tally: Counter) -> str:
    """The window search's tally: windows solved, improved, proved optimal in their model, rejected,
    skipped."""
    parts = [f"{tally['solved']} windows solved", f"{tally['improved']} improved"]
    parts.append(f"{tally['proved']} proved optimal in their model")
    parts += [f"{tally[key]} {key}" for key in ("rejected", "skipped", "unaffordable") if tally[key]]
    return ", ".join(parts)


def _stages(tally: Counter) -> dict[str, float]:
    """Seconds per stage summed over the windows."""
    return {key[:-2]: float(value) for key, value in tally.items() if key.endswith("_s")}
