"""The ownership stage of the CP-SAT strategy: every proposed wave a column, CP-SAT decides.

The joint model (or its large-neighbourhood search), the greedy plan and, where the portfolio ran them
already, the full-sharing and seeded plans propose waves; the ownership model
(:mod:`cpplan.cpsat.owned_model`) chooses which of them run and which rank owns every chunk of each,
with an objective equal to the evaluator's price (less rounding and the bound stated in
:mod:`cpplan.cpsat.handoff_terms`). It starts from the cheapest proposed plan as its hint, so its plan is
never costlier in the model than any proposal. Its statistics replace the proposer's: the objective,
the bound and the gap reported are of a model whose plans are priced as they run.
"""

from __future__ import annotations

import time
from dataclasses import replace

from cpplan.planners.deadline import Deadline
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile

BOUND_MIN_LEFT_S = 0.5
"""Search seconds left, at least, for a wall-clock profile to compute the bound over every plan
(:mod:`cpplan.bound`, tens of milliseconds on a few hundred requests) before the ownership search; a
deterministic profile always does."""

PROPOSALS = "proposals"
"""The key of :attr:`~cpplan.pricing.memo.PricingMemo.planned` under which strategies leave their plans
for the ownership stage (``(PROPOSALS, strategy)``)."""


def remember_proposal(problem: Problem, plan: Plan | None) -> None:
    """Keep ``plan`` (a strategy's answer on ``problem``) as a proposal for the ownership stage."""
    if plan is not None:
        problem.memo.planned[(PROPOSALS, plan.strategy)] = plan


def proposals(problem: Problem, *plans: Plan | None) -> list[Plan]:
    """``plans`` and the proposals the portfolio's strategies left on ``problem``, none splitting an
    item, in a fixed order (the given ones first, then by strategy name)."""
    left = [v for k, v in sorted(problem.memo.planned.items(), key=lambda kv: str(kv[0])) if _is_proposal(k)]
    found = [p for p in (*plans, *left) if p is not None and not any(w.split for w in p.waves)]
    return list({id(p): p for p in found}.values())


def _is_proposal(key: object) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and key[0] == PROPOSALS


def owned_plan(
    problem: Problem,
    profile: SolverProfile,
    deadline: Deadline,
    proposed: tuple[Plan | None, SolverStats | None],
    plans: list[Plan],
) -> tuple[Plan | None, SolverStats | None]:
    """The ownership model over the waves of ``plans`` solved before ``deadline``; without time left
    for it, the proposer's own answer ``proposed`` (plan and statistics) as it is."""
    from cpplan.bound import PROPOSED_WAVES, PlanBound, plan_bound, scoped_stats
    from cpplan.cpsat.owned_model import compile_owned, pool_columns
    from cpplan.cpsat.owned_solve import hint_plan, solve_owned

    best = min(plans, key=lambda p: p.cost_s) if plans else None
    params, proposer = profile.cpsat, proposed[1]
    started = time.perf_counter()
    reserve_s = profile.timing.realize_reserve_s(problem.logical_tokens(range(problem.num_items)))
    search_by = deadline.less(reserve_s)
    if best is None or search_by.left_s() < profile.timing.min_search_s:
        return proposed
    t0 = time.perf_counter()
    bound = PlanBound(bound_s=None, scope=PROPOSED_WAVES, why="no time for it")
    if profile.deterministic or search_by.left_s() >= BOUND_MIN_LEFT_S:  # its time is the search's
        bound = plan_bound(problem, plans, layouts=profile.greedy.layouts)
        plans = [*plans, *bound.new_plans]  # the bound's own plan: its waves become columns too
        best = min(plans, key=lambda p: p.cost_s)
    bound_s = time.perf_counter() - t0
    columns = pool_columns(problem, [p.waves for p in plans], max_free=params.ownership_columns)
    owned = compile_owned(problem, columns, window_chunks=params.ownership_window_chunks)
    hint_plan(owned, best.waves, complete=params.presolve == "off")
    build_s = time.perf_counter() - started - bound_s
    limit = search_by.left_s()
    solve_params = params
    if params.ownership_deterministic_time_s is not None:
        limit_s = params.ownership_deterministic_time_s
        solve_params = params.model_copy(update={"deterministic_time_s": limit_s})
    answer = solve_owned(owned, solve_params, time_limit_s=limit, deterministic=profile.deterministic)
    if answer.plan is None:
        if proposed[0] is None:  # the proposer found nothing and neither did this: say both
            return None, _with_status(proposer, f"ownership model: {answer.stats.status}")
        return _fallback(best, proposer, f"ownership model: {answer.stats.status}")
    stage_s = {**(proposer.stage_s if proposer else {}), "ownership_build": build_s, "bound": bound_s}
    stage_s.update({f"ownership_{k}": v for k, v in answer.stats.stage_s.items()})
    stats = replace(answer.stats, wall_s=time.perf_counter() - started, stage_s=stage_s)
    if proposer is not None and proposer.status.startswith("lns"):  # the windows' tally stays in view
        stats = replace(stats, status=f"{proposer.status}; ownership model: {stats.status}")
    if answer.plan.cost_s > best.cost_s:  # only where the rounds mode's waiting tokens are a bound
        note = f"its plan priced {answer.plan.cost_s:.6f} s, above the hint's {best.cost_s:.6f} s: hint kept"
        stats = scoped_stats(replace(stats, status=f"{stats.status}; {note}"), bound, best.cost_s)
        return Plan(strategy="cpsat", waves=best.waves), stats
    return answer.plan, scoped_stats(stats, bound, answer.plan.cost_s)


def _with_status(stats: SolverStats | None, why: str) -> SolverStats:
    return SolverStats(status=why) if stats is None else replace(stats, status=f"{stats.status}; {why}")


def _fallback(best: Plan, proposer: SolverStats | None, why: str) -> tuple[Plan, SolverStats]:
    """The cheapest proposal, its statistics saying why the ownership model gave none."""
    stats = proposer if proposer is not None else SolverStats(status=why)
    status = f"{stats.status}; {why}" if proposer is not None else why
    return Plan(strategy="cpsat", waves=best.waves), replace(stats, status=status)
