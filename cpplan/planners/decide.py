"""The deciding stage: the ownership model over the pool of proposals, the one place that decides which
proposed waves run and which CP rank owns every chunk of each (docs/cpsat.md, "The ownership model").

Each distinct proposed wave is a column of the model (:mod:`cpplan.cpsat.owned_model`); the cheapest
proposal is its hint, and where the model's answer prices above it or there is none, that proposal is
kept and the outcome says so. Under the clock the profile's estimate
(:meth:`~cpplan.spec.profile.TimingParams.ownership_needs_s`) decides, before the build, how many columns
may take a new split (the costliest first), or that there is no time (outcome ``no_time``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cpplan.planners.budget import Budget
from cpplan.planners.cpsat_strategy import reserve_s
from cpplan.planners.deadline import Deadline
from cpplan.plans.outcome import ModelOutcome, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import TimingParams

if TYPE_CHECKING:
    from cpplan.bound import PlanBound
    from cpplan.cpsat.owned_model import OwnedColumn, OwnedModel
    from cpplan.cpsat.owned_solve import OwnedAnswer


@dataclass(frozen=True, kw_only=True, eq=False)
class Pool:
    """The proposals the deciding stage chooses from, by strategy, in a fixed order (that of
    :data:`cpplan.spec.profile.STRATEGIES`), whatever order the proposers ran in."""

    plans: tuple[Plan, ...]
    """The proposed plans, none splitting an item, one per proposer that answered."""

    proposer: SolverStats | None = None
    """The joint model's statistics, when it ran (its outcome comes before the ownership model's)."""

    proposed: Plan | None = None
    """The joint model's own plan, when it gave one (what CP-SAT answers without the ownership model)."""

    @classmethod
    def of(cls, plans: dict[str, Plan | None], proposer: SolverStats | None = None) -> Pool:
        """The pool of ``plans`` (by the strategy that proposed them; ``None``: no plan)."""
        from cpplan.spec.profile import STRATEGIES

        order = {name: k for k, name in enumerate(("greedy", "joint", *STRATEGIES))}
        ranked = sorted(plans.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
        kept = _proposals(plan for _, plan in ranked if plan is not None)
        return cls(plans=kept, proposer=proposer, proposed=plans.get("joint"))

    @property
    def cheapest(self) -> Plan | None:
        """The cheapest proposal (the first of equal ones)."""
        return min(self.plans, key=lambda p: p.cost_s) if self.plans else None


def _proposals(plans: Iterable[Plan]) -> tuple[Plan, ...]:
    """The plans a pool holds: those that split no item (the one place that rule is applied: the
    ownership model's columns, and the joint model's, are built from whole items)."""
    return tuple(plan for plan in plans if not plan.splits_an_item)


def decide(
    problem: Problem, pool: Pool, budget: Budget, by: Deadline, *, bounded: bool = True
) -> tuple[Plan | None, SolverStats]:
    """The ownership model over ``pool``, solved within the ownership stage's share of ``budget`` and before
    ``by``: its plan and statistics (the joint model's outcome first, when it ran), with the bound over the
    proposed waves unless not ``bounded`` (a pool's plan is bounded as a makespan). Without a proposal to
    decide over, or without time for it, the joint model's own plan (or nothing) with an outcome saying why;
    where it gives no answer, or one priced above the cheapest proposal, that proposal."""
    from cpplan.bound import PROPOSED_WAVES, PlanBound, plan_bound, scoped_stats
    from cpplan.cpsat.owned_model import compile_owned, pool_columns
    from cpplan.cpsat.owned_solve import hint_plan, solve_owned

    profile, best = budget.profile, pool.cheapest
    settings = profile.ownership
    started = time.perf_counter()
    search_by = by.less(reserve_s(problem, profile.timing))
    if best is None or search_by.left_s() < profile.timing.min_search_s:
        status, detail = (Status.SKIPPED, "no proposal") if best is None else (Status.NO_TIME, "")
        outcome = ModelOutcome(model="ownership", status=status, detail=detail)
        return pool.proposed, (pool.proposer or SolverStats()).then(outcome)
    t0 = time.perf_counter()
    why = f"no time for it (under {profile.timing.bound_min_left_s:g} s left: timing.bound_min_left_s)"
    why = why if bounded else "not computed: a pool's plan is bounded as a makespan"
    bound = PlanBound(bound_s=None, scope=PROPOSED_WAVES, why=why)
    if bounded and search_by.can_finish(profile.timing.bound_min_left_s):  # its time is the search's
        bound = plan_bound(problem, pool.plans, layouts=profile.greedy.layouts)
        pool = replace(pool, plans=(*pool.plans, *_proposals(bound.new_plans)))  # its waves become columns
        best = pool.cheapest
    bound_s = time.perf_counter() - t0
    columns = pool_columns(problem, [p.waves for p in pool.plans], max_free=settings.columns)
    columns = affordable_columns(columns, profile.timing, search_by)
    if columns is None:
        return _no_time(pool, "no time to build it")
    owned = compile_owned(problem, columns, window_chunks=settings.window_chunks)
    relax = settings.relaxation_share if budget.deterministic else 0.0
    params = budget.cpsat_params(settings.share * (1 - relax)).model_copy(
        update={"linearization_level": settings.linearization_level}
    )
    relaxed = budget.cpsat_params(settings.share * relax).model_copy(update={"linearization_level": 1})
    if settings.hint != "none":
        complete_work = (
            settings.complete_share * profile.time_budget_s if settings.hint == "complete" else None
        )
        hint_plan(owned, best.waves, complete_work=complete_work, params=params)
    build_s = time.perf_counter() - started - bound_s
    if not search_by.can_finish(profile.timing.min_search_s):
        return _no_time(pool, "built, no time to search", build_s)
    answer = solve_owned(
        owned,
        params,
        time_limit_s=search_by.less(settings.reorder_share * profile.time_budget_s).left_s(),
        deterministic=budget.deterministic,
        relaxed=relaxed if relax > 0 else None,
    )
    answer = _reordered(owned, answer, budget, search_by)
    stage_s = {
        **(pool.proposer.stage_s if pool.proposer else {}),
        "ownership_build": build_s,
        "bound": bound_s,
    }
    stage_s.update({f"ownership_{k}": v for k, v in answer.stats.stage_s.items()})
    stats = replace(answer.stats, wall_s=time.perf_counter() - started, stage_s=stage_s)
    stats = _after(pool.proposer, stats)
    if answer.plan is None:
        return _kept(best, stats, f"the cheapest proposal ({best.strategy}) kept", bound)
    if answer.plan.cost_s > best.cost_s:
        note = (
            f"its plan priced {answer.plan.cost_s:.6f} s, above the cheapest proposal's "
            f"{best.cost_s:.6f} s: that proposal kept"
        )
        return _kept(best, stats, note, bound)
    return answer.plan, scoped_stats(stats, bound, answer.plan.cost_s)


def _reordered(owned: OwnedModel, answer: OwnedAnswer, budget: Budget, by: Deadline) -> OwnedAnswer:
    """``answer`` after the ownership model's second pass
    (:func:`~cpplan.cpsat.owned_solve.reordered`), within ``ownership.reorder_share`` of the budget and
    before ``by``; as it is without a plan, that share or the time."""
    from cpplan.cpsat.owned_solve import reordered

    profile, settings = budget.profile, budget.profile.ownership
    if answer.plan is None or settings.reorder_share == 0 or not by.can_finish(profile.timing.min_search_s):
        return answer
    params = budget.cpsat_params(settings.reorder_share).model_copy(
        update={"linearization_level": settings.linearization_level}
    )
    return reordered(
        owned,
        answer,
        params,
        time_limit_s=by.left_s(),
        deterministic=budget.deterministic,
        window_chunks=settings.window_chunks,
    )


def free_chunks(columns: tuple[OwnedColumn, ...]) -> int:
    """The chunks of the columns whose split the ownership model decides (what its build grows with)."""
    return sum(int(column.wave.owner.size) for column in columns if column.free)


def affordable_columns(
    columns: tuple[OwnedColumn, ...], timing: TimingParams, by: Deadline
) -> tuple[OwnedColumn, ...] | None:
    """``columns`` with as many free columns (the costliest kept free) as the profile's estimate
    (:meth:`~cpplan.spec.profile.TimingParams.ownership_needs_s`) lets the ownership model build and
    search before ``by``; ``None`` when not even the model without free columns fits. A deterministic
    deadline keeps them all."""
    free = sorted((g for g, c in enumerate(columns) if c.free), key=lambda g: (columns[g].wave.cost_s, g))
    while not by.can_finish(timing.ownership_needs_s(len(free), free_chunks(columns))):
        if not free:
            return None
        g = free.pop(0)
        columns = (*columns[:g], replace(columns[g], free=False), *columns[g + 1 :])
    return columns


def _no_time(pool: Pool, detail: str, build_s: float = 0.0) -> tuple[Plan | None, SolverStats]:
    """The joint model's plan (or none) where the ownership model could not finish in the time left."""
    outcome = ModelOutcome(model="ownership", status=Status.NO_TIME, detail=detail)
    stats = (pool.proposer or SolverStats()).then(outcome)
    return pool.proposed, replace(stats, stage_s={**stats.stage_s, "ownership_build": build_s})


def _after(proposer: SolverStats | None, stats: SolverStats) -> SolverStats:
    """The ownership run's ``stats`` with the proposer's outcomes before its own; where the ownership
    model did not answer, the objective and bound reported stay the proposer's (those of the last run
    that answered), its times and model size the ownership run's."""
    if proposer is None:
        return stats
    (outcome,) = stats.outcomes
    if outcome.status.answered:
        return replace(stats, outcomes=(*proposer.outcomes, outcome))
    reported = proposer.then(outcome)
    return replace(
        stats,
        outcomes=reported.outcomes,
        objective_s=reported.objective_s,
        bound_s=reported.bound_s,
        bound_scope=reported.bound_scope,
        gap=reported.gap,
    )


def _kept(best: Plan, stats: SolverStats, note: str, bound: PlanBound) -> tuple[Plan, SolverStats]:
    """The cheapest proposal as the CP-SAT candidate, the ownership run's statistics (``stats``) saying
    in its outcome why its own answer is not it (``note``)."""
    from cpplan.bound import scoped_stats

    outcome = replace(stats.outcomes[-1], kept=note)
    stats = replace(stats, outcomes=(*stats.outcomes[:-1], outcome))
    return Plan(strategy="cpsat", waves=best.waves), scoped_stats(stats, bound, best.cost_s)
