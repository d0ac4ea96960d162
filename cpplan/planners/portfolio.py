"""The planner's loop: propose, decide, schedule, verify once, within one budget (docs/planner_loop.md).

:func:`solve` is the four stages in a row, on every topology: :func:`propose` runs the profile's
strategies in order, each within its share of the budget; :func:`decide_cpsat` has the ownership model
decide the ``cpsat`` candidate (over one :class:`~cpplan.planners.decide.Pool` of every proposal at one CP
size; on a pool of CP groups, the ownership of the ``cpsat`` plan's waves, and of a cheaper proposal's,
one group size at a time);
:func:`schedule` places every plan's waves on the pool of groups as decided; :func:`verify` checks every
candidate once, and the cheapest valid one is kept. Every fault of a stage is recorded as its outcome,
never raised: a faulty backend costs time, never the plan.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cpplan.errors import CpplanError, NoFitError
from cpplan.planners import PLANNERS, Strategy
from cpplan.planners.budget import Budget
from cpplan.planners.cpsat_planner import joint_proposal
from cpplan.planners.cpsat_strategy import ensure_solver, not_run
from cpplan.planners.deadline import NO_TIME, Deadline
from cpplan.planners.decide import Pool, decide
from cpplan.planners.dynamic_cp import group_problem, pool_padding_s
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.item_moves import chained_plan, moved_plan, repacked_plan
from cpplan.planners.makespan_moves import makespan_moved_plan
from cpplan.planners.subproblem import SubProblem
from cpplan.plans.outcome import Ended, ModelOutcome, Status
from cpplan.plans.plan import Candidate, Plan, SolverStats, placed_again
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.plans.result import PlanResult
from cpplan.pricing.problem import Problem, check_static_floor
from cpplan.pricing.wave import WavePlan
from cpplan.spec.profile import SolverProfile
from cpplan.verifier.plan_check import Verification, verify_plan

DISAGREEMENT_TOLERANCE = 0.05
"""Relative gap between a solver's objective and the verified price above which the result notes it."""


@dataclass(frozen=True, kw_only=True)
class StrategyOutcome:
    """What one strategy of the portfolio produced: its plan and verdict, or why it has none."""

    strategy: str
    """The strategy's name, as the profile lists it."""
    ended: Ended
    """How its run ended; :attr:`note` says it in words."""
    plan: Plan | None = None
    """The plan it returned and the verifier could read (``None``: it produced none)."""
    verdict: Verification | None = None
    """The independent verifier's verdict on :attr:`plan` (``None`` when there is no plan)."""
    stats: SolverStats | None = None
    """Statistics the strategy reported (the CP-SAT strategy reports them), verification time added."""
    note: str = ""
    """Why there is no plan, in words (``"refused: ..."``, ``"failed: ..."``, ...: :attr:`ended` is the
    typed form), or, for a verified plan, a solver/evaluator disagreement (empty when there is none)."""
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
    """Plan ``problem`` under ``profile`` within its budget (from ``deadline``'s start when given: a caller
    that started the clock before building the problem), and return the cheapest valid plan with every
    candidate and why it lost (its problem: ``problem`` reordering as the profile says). ``planners`` replaces
    strategies of :data:`~cpplan.planners.PLANNERS` (``cpsat``: the whole CP-SAT candidate). Raises
    :class:`NoFitError` when no strategy yields a valid plan (a strategy's own refusal first)."""
    if deadline is None and "cpsat" in profile.strategies:
        ensure_solver()  # once per process, before the budget starts
    if problem.reorder_waves != profile.greedy.reorder:
        problem = replace(problem, reorder_waves=profile.greedy.reorder)
    budget = Budget.start(problem, profile, deadline)
    check_static_floor(problem.card, problem.memory_bytes)
    steps = {**PLANNERS, **(planners or {})}
    proposed = propose(problem, budget, steps)
    found = decide_cpsat(problem, budget, proposed)
    found = schedule(problem, budget, found)
    found = verify(problem, found)
    winner = _winner(found)
    solver = _solver_stats(found)
    if problem.topology.several_groups and (
        budget.deterministic or budget.deadline.left_s() >= profile.timing.bound_min_left_s
    ):
        from cpplan.bound import pool_scoped_stats  # the bound imports the planners: imported here

        cpsat = next((o.plan for o in found if o.strategy == "cpsat" and o.plan is not None), winner.plan)
        solver = pool_scoped_stats(problem, solver, cpsat.cost_s)  # the gap of CP-SAT's plan, as on one group
    return PlanResult(
        problem=problem,
        plan=winner.plan,
        candidates=tuple(_candidate(o, winner) for o in found),
        solver=solver,
        profile=profile.name,
        wall_s=budget.deadline.elapsed_s(),
    )


@dataclass(frozen=True, kw_only=True)
class Proposals:
    """What stage 1 hands to stage 2: every strategy's outcome by name, in the profile's order but the
    decided ``cpsat`` candidate's, and, where the loop's ownership model decides at one CP size, the
    pool of every proposal it decides over."""

    outcomes: dict[str, StrategyOutcome]
    pool: Pool | None = None
    decides: bool = False
    """Whether the loop's ownership model decides the ``cpsat`` candidate (the registered step runs)."""


def propose(problem: Problem, budget: Budget, steps: Mapping[str, Strategy]) -> Proposals:
    """Stage 1: the strategies in the profile's order, each within its share. At one CP size the
    registered ``cpsat`` step is the joint model's proposal, and every proposal, moved and repacked where
    that is cheaper, goes into the ownership model's pool; where the waves share a pool of CP groups,
    every strategy forms and places its waves on the pool itself (the ``cpsat`` one by the schedule
    model). A ``cpsat`` step other than the registered one stands for every CP-SAT stage."""
    profile = budget.profile
    overridden = {name for name, step in steps.items() if step is not _REGISTERED.get(name)}
    decides = "cpsat" in profile.strategies and "cpsat" not in overridden
    pooled = problem.topology.several_groups
    by = budget.verify_by if pooled else budget.proposers_by()
    found: dict[str, StrategyOutcome] = {}
    joint: tuple[Plan | None, SolverStats | None] = (None, None)
    for name in profile.strategies:
        if name == "cpsat" and "cpsat" not in overridden and not pooled:
            joint = _joint(problem, budget, found, by)
            continue
        held = _held_back(name, problem, profile, list(found.values()), by)
        stage = budget.verify_by if name == "cpsat" or pooled else budget.stage(1.0, by)
        found[name] = held or run_strategy(name, steps.get(name), problem, profile, stage)
    if pooled or not decides:
        return Proposals(outcomes=found, decides=decides)
    plans = {name: o.plan for name, o in found.items()} | {"joint": joint[0]}
    pool = _moved(problem, budget, Pool.of(plans, joint[1]), by)
    return Proposals(outcomes=found, pool=pool, decides=True)


def decide_cpsat(problem: Problem, budget: Budget, proposed: Proposals) -> list[StrategyOutcome]:
    """Stage 2: the ownership model decides the ``cpsat`` candidate: over the pool of proposals at one
    CP size, or, on a pool of CP groups, the ownership of the ``cpsat`` plan's waves (and of a cheaper
    proposal's) one group size at a time (:func:`_decided_pools`). Every outcome in the profile's order."""
    found = dict(proposed.outcomes)
    if proposed.pool is not None:
        found["cpsat"] = _decided(problem, proposed.pool, budget)
    elif proposed.decides:
        found["cpsat"] = _decided_pools(problem, budget, found)
    return [found[name] for name in budget.profile.strategies]


def _decided_pools(problem: Problem, budget: Budget, found: dict[str, StrategyOutcome]) -> StrategyOutcome:
    """Stage 2 on a pool of CP groups: the ``cpsat`` plan's waves decided (:func:`decided_on_the_pool`),
    and, where another strategy proposed a cheaper plan, that plan's waves decided too, as the ``cpsat``
    candidate's: the one of the two whose decided waves, placed again, end sooner."""
    cpsat = found["cpsat"]
    proposed = [o for o in found.values() if o.plan is not None]
    cheapest = min(proposed, key=lambda o: o.plan.cost_s, default=cpsat)
    decided = decided_on_the_pool(problem, budget, cpsat)
    if cheapest is cpsat or (cpsat.plan is not None and cpsat.plan.cost_s <= cheapest.plan.cost_s):
        return decided
    other = replace(cpsat, plan=replace(cheapest.plan, strategy="cpsat"), ended=cheapest.ended, note="")
    other = decided_on_the_pool(problem, budget, other)
    padding_s = pool_padding_s(problem)
    if (
        decided.plan is None
        or placed_again(other.plan, padding_s).cost_s < placed_again(decided.plan, padding_s).cost_s
    ):
        return other
    return decided


def schedule(problem: Problem, budget: Budget, found: list[StrategyOutcome]) -> list[StrategyOutcome]:
    """Stage 3, where the waves share a pool of CP groups: every plan's waves, as decided, timed on the
    GPUs they hold or placed afresh where that lowers the makespan (:func:`~cpplan.plans.plan.placed_again`),
    and the ``cpsat`` plan's items moved between its waves where that ends the step sooner
    (:func:`_makespan_moved`); at one CP size, the outcomes as they are."""
    if not problem.topology.several_groups:
        return found
    padding_s = pool_padding_s(problem)
    placed = [o if o.plan is None else replace(o, plan=placed_again(o.plan, padding_s)) for o in found]
    return [_makespan_moved(problem, budget, o, padding_s) if o.strategy == "cpsat" else o for o in placed]


def _makespan_moved(
    problem: Problem, budget: Budget, outcome: StrategyOutcome, padding_s: float | None
) -> StrategyOutcome:
    """``outcome`` with its scheduled plan's items moved between waves of one group size while that
    lowers the makespan (:func:`~cpplan.planners.makespan_moves.makespan_moved_plan`, within the
    profile's ``moves.max_pricings`` and the verification's deadline; above ``moves.max_waves`` waves,
    its waves merged instead), the moves' seconds in its wall time."""
    settings = budget.profile.moves
    plan = outcome.plan
    if plan is None or settings.max_pricings == 0:
        return outcome
    started = time.perf_counter()
    try:
        moved = makespan_moved_plan(
            problem,
            plan,
            budget.profile.greedy.layouts,
            max_pricings=settings.max_pricings,
            deadline=budget.verify_by,
            padding_s=padding_s,
            merge_waves=plan.num_waves > settings.max_waves,
        )
    except CpplanError:  # a faulty stage costs time, never the plan
        moved = None
    wall_s = outcome.wall_s + time.perf_counter() - started
    return replace(outcome, plan=moved or plan, wall_s=wall_s)


def _held_back(
    name: str, problem: Problem, profile: SolverProfile, found: list[StrategyOutcome], by: Deadline
) -> StrategyOutcome | None:
    """Why strategy ``name`` is not started, or ``None``: with a plan in hand, less time left before ``by``
    than the quickest strategy with a plan took (a :data:`SELF_TIMED` one excepted); or more items than
    the profile's ``seeded.max_items`` for the seeded proposer."""
    done = [o.wall_s for o in found if o.plan is not None]
    if name not in SELF_TIMED and done and by.left_s() < min(done):
        return StrategyOutcome(strategy=name, ended=Ended.NO_TIME, note=NO_TIME)
    limit = profile.seeded.max_items
    if name == "seeded" and limit is not None and problem.num_items > limit:
        note = f"not run: {problem.num_items} items, above seeded.max_items ({limit})"
        return StrategyOutcome(strategy="seeded", ended=Ended.NO_PLAN, note=note)
    return None


_REGISTERED = dict(PLANNERS)
"""The strategies as registered, to tell a replaced one (a test's, a user's backend) from them."""


def _joint(
    problem: Problem, budget: Budget, found: dict[str, StrategyOutcome], by: Deadline
) -> tuple[Plan | None, SolverStats | None]:
    """The joint model's proposal from the greedy plan (greedy's candidate, or greedy run for it when
    the profile has none); none where greedy has no plan."""
    profile = budget.profile
    greedy = found["greedy"].plan if "greedy" in found else None
    started = time.perf_counter()
    try:
        if greedy is None:
            greedy = cached_greedy_plan(problem, profile.greedy.layouts, by)
        plan, stats = joint_proposal(problem, budget, greedy, budget.stage(profile.joint.share, by))
    except CpplanError as exc:
        why = f"{type(exc).__name__}: {exc}"
        return None, not_run("joint", Status.FAILED, why)
    return plan, replace(stats, wall_s=time.perf_counter() - started)


def _moved(problem: Problem, budget: Budget, pool: Pool, by: Deadline) -> Pool:
    """``pool`` and, where its cheapest proposal has at most ``moves.max_waves`` waves, that plan with
    items moved between its waves (:func:`~cpplan.planners.item_moves.moved_plan`, within the profile's
    ``moves.max_pricings`` and ``by``), then its waves' whole requests packed onto ranks again
    (:func:`~cpplan.planners.item_moves.repacked_plan`), then its waves' ranks chained round their packed
    order (:func:`~cpplan.planners.item_moves.chained_plan`, at ``moves.chain_rotations``), each where
    that is cheaper; the moves' seconds among the proposer's stages."""
    settings, best = budget.profile.moves, pool.cheapest
    if best is None or best.num_waves > settings.max_waves:
        return pool
    started = time.perf_counter()
    layouts, limit = budget.profile.greedy.layouts, settings.max_pricings
    moved = repacked = chained = None
    try:
        if limit > 0:
            moved = moved_plan(problem, best, layouts, max_pricings=limit, deadline=by)  # None for one wave
            repacked = repacked_plan(problem, moved or best, deadline=by)
        rotations = settings.chain_rotations
        chained = chained_plan(problem, repacked or moved or best, rotations=rotations, deadline=by)
    except CpplanError:  # a faulty stage costs time, never the plan
        pass
    found = tuple(plan for plan in (moved, repacked, chained) if plan is not None)
    proposer = pool.proposer
    if proposer is not None:
        proposer = replace(proposer, stage_s={**proposer.stage_s, "moves": time.perf_counter() - started})
    return replace(pool, plans=(*pool.plans, *found), proposer=proposer)


def _decided(problem: Problem, pool: Pool, budget: Budget) -> StrategyOutcome:
    """The ``cpsat`` candidate: the ownership model's decision over ``pool``, faults recorded."""
    started = time.perf_counter()
    try:
        plan, stats = decide(problem, pool, budget, budget.verify_by)
    except Exception as exc:  # a faulty model costs time, never the plan
        why = f"raised {type(exc).__name__}: {exc}"
        return _failed("cpsat", Ended.FAILED, why, started, stats=pool.proposer)
    if plan is None:
        if stats.deciding.status is Status.NO_TIME:
            return _failed("cpsat", Ended.NO_TIME, NO_TIME, started, stats=stats)
        return _failed("cpsat", Ended.NO_PLAN, stats.deciding.words(), started, stats=stats)
    wall_s = time.perf_counter() - started + (pool.proposer.wall_s if pool.proposer else 0.0)
    return StrategyOutcome(strategy="cpsat", ended=Ended.PLANNED, plan=plan, stats=stats, wall_s=wall_s)


def decided_on_the_pool(problem: Problem, budget: Budget, outcome: StrategyOutcome) -> StrategyOutcome:
    """Stage 2 on a pool: the ownership model decides the ownership of the ``cpsat`` plan's waves (those
    splitting no item), one group size at a time, and each wave takes the decided ownership where that
    prices it lower, then its ranks chained round its packed order where that is cheaper still
    (:func:`~cpplan.planners.item_moves.chained_plan`); the plan keeps its placement for stage 3 to time
    again. The ownership runs' outcomes come before the schedule model's (so the plan JSON's
    ``solver.status`` stays the schedule model's); a fault is recorded, never raised."""
    if outcome.plan is None:
        return outcome
    started = time.perf_counter()
    waves, stats = list(outcome.plan.waves), outcome.stats or SolverStats()
    decided: list[ModelOutcome] = []
    try:
        for size in sorted({w.cp for w in waves if not w.split and w.cp > 1}):
            chosen = [k for k, w in enumerate(waves) if w.cp == size and not w.split]
            decided_waves = _decided_waves(problem, budget, size, [waves[k] for k in chosen], decided)
            for k, new in zip(chosen, decided_waves, strict=True):
                waves[k] = new if new.cost_s < waves[k].cost_s else waves[k]
        chained = chained_plan(
            problem,
            replace(outcome.plan, waves=tuple(waves)),
            rotations=budget.profile.moves.chain_rotations,
            deadline=budget.verify_by,
        )
        waves = list(chained.waves) if chained is not None else waves
    except Exception as exc:  # a faulty model costs time, never the plan
        detail = f"raised {type(exc).__name__}: {exc}"
        failed = ModelOutcome(model="ownership", status=Status.FAILED, detail=detail)
        decided.append(failed)
    stats = replace(stats, outcomes=(*stats.outcomes[:-1], *decided, *stats.outcomes[-1:]))
    plan = replace(outcome.plan, waves=tuple(waves))
    return replace(outcome, plan=plan, stats=stats, wall_s=outcome.wall_s + time.perf_counter() - started)


def _decided_waves(
    problem: Problem, budget: Budget, size: int, waves: list[WavePlan], outcomes: list[ModelOutcome]
) -> list[WavePlan]:
    """``waves`` (of CP group ``size``, whole items) with the ownership model's decision over them, on
    the sub-problem of their items (each wave as it was where the model gives none; a rank of the group
    may own no chunk: execution runs it exactly on no token); its outcome is appended to ``outcomes``."""
    items = sorted(i for w in waves for i in w.items)
    sub = SubProblem.of(group_problem(problem, size), items)
    proposal = Plan(strategy="cpsat", waves=tuple(sub.from_parent(w) for w in waves))
    plan, run = decide(sub.problem, Pool.of({"cpsat": proposal}), budget, budget.verify_by, bounded=False)
    outcomes.append(run.outcomes[-1])
    decided = (sub.to_parent(w) for w in (plan.waves if plan is not None else ()))
    by_items = {w.items: w for w in decided}
    return [by_items.get(w.items, w) for w in waves]


def verify(problem: Problem, found: list[StrategyOutcome]) -> list[StrategyOutcome]:
    """Stage 4: every outcome with a plan gets the independent verifier's verdict, once per distinct plan."""
    verified: list[tuple[dict[str, Any], Verification]] = []
    return [verify_outcome(problem, o, verified) if o.plan is not None else o for o in found]


def _solver_stats(found: list[StrategyOutcome]) -> SolverStats:
    """The CP-SAT candidate's statistics, or a record of why CP-SAT did not run."""
    stats = next((o.stats for o in reversed(found) if o.stats is not None), None)
    if stats is not None:
        return stats
    if not any(o.ended is Ended.NO_TIME for o in found):
        return SolverStats()
    return not_run("ownership", Status.NO_TIME)


def run_strategy(
    strategy: str, planner: Strategy | None, problem: Problem, profile: SolverProfile, deadline: Deadline
) -> StrategyOutcome:
    """Run one strategy. A refusal, an error or any exception it raises is recorded, never raised: a
    faulty backend costs time, never the plan."""
    if planner is None:
        return StrategyOutcome(strategy=strategy, ended=Ended.UNAVAILABLE, note="backend not available")
    started = time.perf_counter()
    try:
        plan, stats = planner(problem, profile, deadline)
    except NoFitError as exc:
        return _failed(strategy, Ended.REFUSED, f"refused: {exc}", started, refusal=exc)
    except CpplanError as exc:
        return _failed(strategy, Ended.FAILED, f"failed: {exc}", started)
    except Exception as exc:
        return _failed(strategy, Ended.FAILED, f"raised {type(exc).__name__}: {exc}", started)
    if plan is None:
        note = "no solution within its time"
        if stats is not None and stats.deciding is not None:
            note = stats.deciding.words()
        return _failed(strategy, Ended.NO_PLAN, note, started, stats=stats)
    wall_s = time.perf_counter() - started
    return StrategyOutcome(strategy=strategy, ended=Ended.PLANNED, plan=plan, stats=stats, wall_s=wall_s)


SELF_TIMED = frozenset({"cpsat"})
"""Strategies that keep their own time (CP-SAT builds and searches only what fits before the
deadline), so the portfolio does not hold them back; the others are whole passes, started only when
they can finish."""


def _failed(
    strategy: str,
    ended: Ended,
    note: str,
    started: float,
    *,
    refusal: NoFitError | None = None,
    stats: SolverStats | None = None,
) -> StrategyOutcome:
    """An outcome without a plan: how the run ended, in words too."""
    wall_s = time.perf_counter() - started
    return StrategyOutcome(
        strategy=strategy, ended=ended, note=note, wall_s=wall_s, refusal=refusal, stats=stats
    )


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
        return StrategyOutcome(
            strategy=outcome.strategy, ended=Ended.FAILED, note=note, wall_s=wall_s, stats=outcome.stats
        )
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
    """The cheapest valid outcome: on a tie the decided plan (``cpsat``, the ownership model's answer
    over every proposal), else the earliest; without one, the first refusal or an error listing each
    strategy's reason."""
    valid = [o for o in outcomes if o.valid]
    if valid:
        return min(valid, key=lambda o: (o.verdict.cost_s, o.strategy != "cpsat"))
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
        kept = "the decided plan is kept" if winner.strategy == "cpsat" else "the earlier is kept"
        why = (
            f"tied: costs {chosen:.6f} s, as the chosen {winner.strategy} ({kept})"
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
