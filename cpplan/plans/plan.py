"""Immutable results of planning: a plan (its waves, and its schedule on the pool), the portfolio's
candidates, solver statistics."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from cpplan.plans.outcome import ModelOutcome, Scope, Status
from cpplan.plans.pool_schedule import Schedule, place, timed
from cpplan.pricing.wave import WavePlan, local_tokens


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """Waves in execution order, produced by one strategy, priced by the evaluator; with a
    ``schedule`` (a pool of several CP groups: ``dp > 1`` or dynamic CP), also where and when each
    wave runs."""

    strategy: str
    waves: tuple[WavePlan, ...]
    schedule: Schedule | None = None
    notes: tuple[str, ...] = ()
    """What the strategy says about this plan (say, that the deadline cut its search short); the
    portfolio adds them to the candidate's reason."""

    def __post_init__(self) -> None:
        assert self.schedule is None or len(self.schedule.gpus) == len(self.waves), "one placement per wave"

    @property
    def cost_s(self) -> float:
        """Predicted seconds: the schedule's makespan, or without one the sum of the waves' costs."""
        if self.schedule is not None:
            return self.schedule.makespan_s
        return math.fsum(w.cost_s for w in self.waves)

    @property
    def num_waves(self) -> int:
        """Number of waves."""
        return len(self.waves)

    @property
    def splits_an_item(self) -> bool:
        """Whether some wave holds only part of an item (the split path for an item no wave holds)."""
        return any(w.split for w in self.waves)

    @property
    def packed_tokens(self) -> int:
        """Packed tokens over all waves."""
        return sum(w.packed_tokens for w in self.waves)

    @property
    def logical_tokens(self) -> int:
        """Unpacked tokens over all waves."""
        return sum(w.logical_tokens for w in self.waves)

    @property
    def peak_bytes(self) -> int:
        """The largest predicted rank peak over all waves."""
        return max(w.peak_bytes for w in self.waves)

    @property
    def busiest_over_mean(self) -> float:
        """Rank imbalance over the step: the sum of each wave's busiest-rank local tokens over the sum
        of its mean."""
        busiest = sum(float(local_tokens(w).max()) for w in self.waves)
        mean = sum(float(local_tokens(w).mean()) for w in self.waves)
        return busiest / max(mean, 1e-9)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One strategy's outcome in the portfolio: its cost, whether it verified, and why it lost."""

    strategy: str
    cost_s: float | None
    valid: bool
    reason: str
    wall_s: float
    num_waves: int | None = None


@dataclass(frozen=True, kw_only=True)
class SolverStats:
    """What the planner's CP-SAT stages report: one typed record per model run (:attr:`outcomes`), and
    the deciding run's objective, proven bound, gap, times and model size.

    The deciding run is the last of :attr:`outcomes`: the ownership model where it ran (its objective
    is the evaluator's price of its plan, its bound one of every plan of the proposed waves), else the
    joint or schedule model (whose rows are conservative: their bound is of their own model only)."""

    outcomes: tuple[ModelOutcome, ...] = ()
    """Every model run of the call, in the order they ran (the deciding one last)."""
    objective_s: float | None = None
    """The deciding model's objective of its answer, in seconds."""
    bound_s: float | None = None
    """The proven lower bound, in seconds: the deciding model's, or, where the planner proved one over
    every valid plan (:mod:`cpplan.bound`), that one; what it bounds is :attr:`bound_scope`."""
    bound_scope: Scope | None = None
    """What :attr:`bound_s` bounds: ``all plans`` (every valid plan of the problem, whatever its waves;
    :attr:`gap` is then the plan's price over it), ``proposed waves`` (every plan of the proposed waves:
    the ownership model's) or ``its model`` (the joint or schedule model's conservative rows)."""
    gap: float | None = None
    """``(objective - bound) / objective`` of the deciding model; with :attr:`bound_scope` ``all
    plans``, ``(price - bound) / price`` of the CP-SAT plan (the model's own gap is
    :attr:`model_gap`)."""
    wall_s: float = 0.0
    deterministic_time: float | None = None
    num_booleans: int = 0
    num_integers: int = 0
    num_constraints: int = 0
    ortools_version: str = ""
    stage_s: dict[str, float] = field(default_factory=dict)
    price_terms_s: dict[str, float] = field(default_factory=dict)
    """Where the ownership model's objective falls short of the evaluator's price of its plan, in
    seconds per term (``barriers``, ``handoff``, ``overhead``: rounding down, and the rounds mode's
    waiting-token bound in ``handoff``); empty when the ownership model did not run."""

    @property
    def deciding(self) -> ModelOutcome | None:
        """The last model run (``None`` when none ran): the stage whose answer the CP-SAT candidate is."""
        return self.outcomes[-1] if self.outcomes else None

    @property
    def answered(self) -> ModelOutcome | None:
        """The last model run that answered (whose objective and bound these statistics report)."""
        return next((o for o in reversed(self.outcomes) if o.status.answered), None)

    @property
    def model_gap(self) -> float | None:
        """The gap the answered model proved over its own bound (:attr:`answered`'s), whatever bound
        :attr:`gap` is taken over; ``None`` where no objective is reported."""
        found = self.answered
        return found.gap if found is not None and self.objective_s is not None else None

    @property
    def status(self) -> str:
        """The deciding run's status as the plan JSON's ``solver.status`` writes it (``not_run``
        without one)."""
        return self.deciding.status.value if self.deciding is not None else Status.NOT_RUN.value

    def then(self, outcome: ModelOutcome) -> SolverStats:
        """These statistics with ``outcome`` run after them; where it answered, its objective and bound
        are the ones reported."""
        stats = dataclasses.replace(self, outcomes=(*self.outcomes, outcome))
        if not outcome.status.answered:
            return stats
        return dataclasses.replace(
            stats,
            objective_s=outcome.objective_s,
            bound_s=outcome.bound_s,
            bound_scope=outcome.bound_scope,
            gap=outcome.gap,
        )


def balanced(plan: Plan, pool: int, padding_s: float | None = None) -> Plan:
    """``plan`` with its waves placed by :func:`~cpplan.plans.pool_schedule.place` on a
    pool of ``pool`` GPUs, in the placement's order (under equal waves, ``padding_s``: the seconds of
    one empty padding wave); a plan that already has a schedule keeps its placement, its padding
    priced at ``padding_s`` (:func:`repadded`)."""
    if plan.schedule is not None:
        return repadded(plan, padding_s)
    split_items = [w.items[0] if w.split else None for w in plan.waves]
    costs, sizes = [w.cost_s for w in plan.waves], [w.cp for w in plan.waves]
    order, schedule = place(costs, sizes, pool, split_items, padding_s)
    return dataclasses.replace(plan, waves=tuple(plan.waves[w] for w in order), schedule=schedule)


def placed_again(plan: Plan, padding_s: float | None = None) -> Plan:
    """A scheduled ``plan`` whose waves' costs may have changed: its waves timed on the GPUs they hold,
    or placed afresh (:func:`balanced` of its waves) where that gives a lower makespan."""
    schedule = plan.schedule
    assert schedule is not None, "only a scheduled plan is placed again"
    kept = dataclasses.replace(
        plan, schedule=timed([w.cost_s for w in plan.waves], schedule.gpus, schedule.pool, padding_s)
    )
    fresh = balanced(dataclasses.replace(plan, schedule=None), schedule.pool, padding_s)
    return fresh if fresh.cost_s < kept.cost_s else kept


def repadded(plan: Plan, padding_s: float | None) -> Plan:
    """A scheduled ``plan`` with its padding (and makespan) priced at ``padding_s`` (``None``: no
    padding): the plan itself when that is how it is priced already."""
    schedule = plan.schedule
    assert schedule is not None, "only a scheduled plan is padded"
    if (schedule.padding is None) == (padding_s is None) and schedule.padding_s == (padding_s or 0.0):
        return plan
    costs = [w.cost_s for w in plan.waves]
    return dataclasses.replace(plan, schedule=timed(costs, schedule.gpus, schedule.pool, padding_s))


__all__ = ["Candidate", "Plan", "SolverStats", "balanced", "placed_again", "repadded"]
