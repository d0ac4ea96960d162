"""The portfolio: run the profile's strategies, verify each plan independently, keep the cheapest valid one.

:func:`solve` is a free function over an already built problem (the model is PyVRP's ``solve``). Each
strategy runs once (:func:`run_strategy`, which turns every fault into a recorded outcome), its plan is
verified by the independent verifier (:func:`verify_outcome`), and every candidate's reason is written
from the outcomes (:func:`candidate_reason`).

Time: strategies search until the deadline less :func:`verify_reserve_s` (what verifying their plan
takes), so the call ends about at the deadline. Once some plan is valid, a strategy starts only when
the time left is at least what the quickest valid one took (else "skipped: no time left"), except
CP-SAT, which keeps its own time; without a valid plan they still run
(greedy and full sharing past their deadline pack with full sharing at once: the floor). The runtime
profile lists greedy first, then CP-SAT warm-started from it, and the rest only with time to spare.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cpplan.errors import CpplanError, NoFitError
from cpplan.planners import PLANNERS, Strategy
from cpplan.planners.cpsat_strategy import ensure_solver
from cpplan.planners.deadline import NO_TIME, Deadline, verify_reserve_s
from cpplan.plans.plan import Candidate, Plan, SolverStats
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.plans.result import PlanResult
from cpplan.pricing.problem import Problem, check_static_floor
from cpplan.spec.profile import SolverProfile
from cpplan.verifier.plan_check import Verification, verify_plan

DISAGREEMENT_TOLERANCE = 0.05
"""Relative gap between a solver's objective and the verified price above which the result notes it."""


@dataclass(frozen=True, kw_only=True)
class StrategyOutcome:
    """What one strategy of the portfolio produced: its plan and verdict, or why it has none."""

    strategy: str
    """The strategy's name, as the profile lists it."""

    plan: Plan | None = None
    """The plan it returned and the verifier could read (``None``: it produced none)."""

    verdict: Verification | None = None
    """The independent verifier's verdict on :attr:`plan` (``None`` when there is no plan)."""

    stats: SolverStats | None = None
    """Statistics the strategy reported (the CP-SAT strategy reports them), verification time added."""

    note: str = ""
    """Why there is no plan (``"refused: ..."``, ``"failed: ..."``, ...), or, for a verified plan, a
    solver/evaluator disagreement (empty when there is none)."""

    wall_s: float = 0.0
    """Seconds the strategy and the verification of its plan took."""

    refusal: NoFitError | None = field(default=None, repr=False)
    """The strategy's refusal, raised by :func:`solve` when no strategy yields a valid plan."""

    @property
    def valid(self) -> bool:
        """Whether the strategy produced a plan the verifier accepted."""
        return self.plan is not None and self.verdict is not None and self.verdict.valid


def solve(
    problem: Problem,
    profile: SolverProfile,
    *,
    planners: Mapping[str, Strategy] | None = None,
    deadline: Deadline | None = None,
) -> PlanResult:
    """Run ``profile``'s strategies on ``problem`` (``planners`` adds to or replaces entries of
    :data:`~cpplan.planners.PLANNERS`) before ``deadline`` (default: the profile's time budget from
    now), verify each plan, and return the cheapest valid one with every candidate and why it lost.
    The deadline decides everything the clock may cut short (a deterministic one cuts nothing short);
    the profile's own ``deterministic`` flag sets CP-SAT's parameters. ``PlanResult.wall_s`` counts
    from the deadline's start. Raises :class:`NoFitError` when no strategy
    yields a valid plan (a strategy's own refusal first, when one refused)."""
    if deadline is None:
        if "cpsat" in profile.strategies:
            ensure_solver()  # once per process, before the budget starts
        deadline = Deadline.of_profile(profile)
    deadline = replace(deadline, timing=profile.timing)  # every strategy decides by the profile's
    check_static_floor(problem.card, problem.memory_bytes)
    table = {**PLANNERS, **(planners or {})}
    verified: list[tuple[dict[str, Any], Verification]] = []
    outcomes: list[StrategyOutcome] = []
    search_by = deadline.less(verify_reserve_s(problem, profile.timing))
    for strategy in profile.strategies:
        if strategy not in SELF_TIMED and _no_time_for_another(outcomes, search_by):
            outcomes.append(_skipped(strategy))
            continue
        outcome = run_strategy(strategy, table.get(strategy), problem, profile, search_by)
        if outcome.plan is not None:
            outcome = verify_outcome(problem, outcome, verified)
        outcomes.append(outcome)
    winner = _winner(outcomes)
    unrun = SolverStats(status=NO_TIME if any(o.note == NO_TIME for o in outcomes) else "not_run")
    stats = next((o.stats for o in reversed(outcomes) if o.stats is not None), unrun)
    return PlanResult(
        problem=problem,
        plan=winner.plan,
        candidates=tuple(_candidate(o, winner) for o in outcomes),
        solver=stats,
        profile=profile.name,
        wall_s=deadline.elapsed_s(),
    )


def run_strategy(
    strategy: str, planner: Strategy | None, problem: Problem, profile: SolverProfile, deadline: Deadline
) -> StrategyOutcome:
    """Run one strategy. A refusal, an error or any exception it raises is recorded, never raised: a
    faulty backend costs time, never the plan."""
    if planner is None:
        return StrategyOutcome(strategy=strategy, note="backend not available")
    started = time.perf_counter()
    try:
        plan, stats = planner(problem, profile, deadline)
    except NoFitError as exc:
        return _failed(strategy, f"refused: {exc}", started, refusal=exc)
    except CpplanError as exc:
        return _failed(strategy, f"failed: {exc}", started)
    except Exception as exc:
        return _failed(strategy, f"raised {type(exc).__name__}: {exc}", started)
    if plan is None:
        note = "no solution within its time"
        if stats is not None:
            plain = stats.status.startswith(("skipped", "lns"))  # already says why there is no plan
            note = stats.status if plain else f"no solution ({stats.status})"
        return _failed(strategy, note, started, stats=stats)
    return StrategyOutcome(strategy=strategy, plan=plan, stats=stats, wall_s=time.perf_counter() - started)


SELF_TIMED = frozenset({"cpsat"})
"""Strategies that keep their own time (CP-SAT builds and searches only what fits before the
deadline), so the portfolio does not hold them back; the others are whole passes, started only when
they can finish."""


def _no_time_for_another(outcomes: list[StrategyOutcome], search_by: Deadline) -> bool:
    """With a valid plan in hand, whether the time left is shorter than the quickest valid strategy
    took: another one would overrun the deadline (a strategy stopped at its deadline still finishes its
    plan)."""
    valid = [o.wall_s for o in outcomes if o.valid]
    return bool(valid) and search_by.left_s() < min(valid)


def _skipped(strategy: str) -> StrategyOutcome:
    """A strategy not started because the deadline has passed and a valid plan is in hand."""
    return StrategyOutcome(strategy=strategy, note=NO_TIME)


def _failed(
    strategy: str,
    note: str,
    started: float,
    *,
    refusal: NoFitError | None = None,
    stats: SolverStats | None = None,
) -> StrategyOutcome:
    wall_s = time.perf_counter() - started
    return StrategyOutcome(strategy=strategy, note=note, wall_s=wall_s, refusal=refusal, stats=stats)


def verify_outcome(
    problem: Problem, outcome: StrategyOutcome, verified: list[tuple[dict[str, Any], Verification]]
) -> StrategyOutcome:
    """``outcome`` with its plan's verdict from the independent verifier. A plan identical to one in
    ``verified`` (strategies often agree) gets that verdict; a new one is verified and added. A plan
    object the verifier cannot read turns the outcome into a failed one."""
    assert outcome.plan is not None
    started = time.perf_counter()
    try:
        data = plan_to_dict(problem, outcome.plan)
        data.pop("strategy")
        verdict = next((v for d, v in verified if d == data), None)
        if verdict is None:
            verdict = verify_plan(
                data, problem.workload, problem.card, problem.memory_bytes, chunk_tokens=problem.chunk_tokens
            )
            verified.append((data, verdict))
    except Exception as exc:  # a malformed plan object is a failed strategy, not a crash
        note = f"returned an unreadable plan ({type(exc).__name__}: {exc})"
        wall_s = outcome.wall_s + time.perf_counter() - started
        return StrategyOutcome(strategy=outcome.strategy, note=note, wall_s=wall_s, stats=outcome.stats)
    stats = outcome.stats
    if stats is not None:
        verify_s = stats.stage_s.get("verify", 0.0) + time.perf_counter() - started
        stats = replace(stats, stage_s={**stats.stage_s, "verify": verify_s})
    return replace(
        outcome,
        verdict=verdict,
        stats=stats,
        note=_disagreement(outcome.stats, verdict),
        wall_s=outcome.wall_s + time.perf_counter() - started,
    )


def _disagreement(stats: SolverStats | None, verdict: Verification) -> str:
    """A note when a solver's own objective differs from the verifier's price of its plan by more
    than :data:`DISAGREEMENT_TOLERANCE`; the verified price is the one the portfolio ranks by."""
    if stats is None or stats.objective_s is None or verdict.cost_s is None:
        return ""
    claimed, priced = stats.objective_s, verdict.cost_s
    if abs(claimed - priced) <= DISAGREEMENT_TOLERANCE * max(abs(priced), 1e-9):
        return ""
    return (
        f"solver/evaluator disagreement: the solver's objective is {claimed:.6f} s, "
        f"the evaluator prices its plan at {priced:.6f} s"
    )


def _winner(outcomes: list[StrategyOutcome]) -> StrategyOutcome:
    """The first cheapest valid outcome; without one, the first refusal or an error listing each
    strategy's reason."""
    valid = [o for o in outcomes if o.valid]
    if valid:
        return min(valid, key=lambda o: o.verdict.cost_s)
    refusal = next((o.refusal for o in outcomes if o.refusal is not None), None)
    if refusal is not None:
        raise refusal
    reasons = "; ".join(
        f"{o.strategy}: {o.note or (o.verdict.violations[0] if o.verdict else '?')}" for o in outcomes
    )
    raise NoFitError(f"no strategy produced a valid plan ({reasons})")


def candidate_reason(outcome: StrategyOutcome, winner: StrategyOutcome) -> str:
    """Why ``outcome`` won or lost against ``winner``: its note when it has no verified plan; its first
    violation when its plan is invalid; otherwise chosen, costlier or tied (disagreement notes kept)."""
    verdict = outcome.verdict
    if outcome.plan is None or verdict is None:
        return outcome.note
    if not verdict.valid:
        more = len(verdict.violations) - 1
        why = f"invalid: {verdict.violations[0]}" + (f" (+{more} more)" if more > 0 else "")
        return why + (f"; {outcome.note}" if outcome.note else "")
    if outcome.strategy == winner.strategy:
        why = "chosen: cheapest valid plan"
    else:
        chosen = winner.verdict.cost_s
        assert verdict.cost_s >= chosen, "the winner is the cheapest valid outcome"
        why = (
            f"tied: costs {chosen:.6f} s, as the chosen {winner.strategy} (the earlier is kept)"
            if verdict.cost_s == chosen
            else f"costs {verdict.cost_s:.6f} s, not below the chosen {chosen:.6f} s"
        )
    return "; ".join([why, *outcome.plan.notes, *([outcome.note] if outcome.note else [])])


def _candidate(outcome: StrategyOutcome, winner: StrategyOutcome) -> Candidate:
    verified = outcome.plan is not None and outcome.verdict is not None
    return Candidate(
        strategy=outcome.strategy,
        cost_s=outcome.verdict.cost_s if verified else None,
        valid=outcome.valid,
        reason=candidate_reason(outcome, winner),
        wall_s=outcome.wall_s,
        num_waves=outcome.plan.num_waves if verified else None,
    )
