"""Solving the ownership model: hint, CP-SAT run, the plan read back and priced by the evaluator."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from cpplan.cpsat.owned_model import OwnedModel, compile_owned, cover_bound, layout_key, reordered_column
from cpplan.cpsat.rank_split import is_rank_ordered
from cpplan.cpsat.solve import STATUSES, run_on_work, run_solver, run_stats
from cpplan.plans.outcome import ModelOutcome, Scope, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, balanced_ownership, price_wave
from cpplan.spec.profile import CpSatParams


@dataclass(frozen=True, kw_only=True)
class OwnedAnswer:
    """The realized plan (``None`` without a solution) and the run's statistics (objective and bound
    in seconds)."""

    plan: Plan | None
    stats: SolverStats


def hint_plan(
    owned: OwnedModel,
    waves: Sequence[WavePlan],
    *,
    complete_work: float | None = None,
    params: CpSatParams | None = None,
) -> bool:
    """Hint the plan made of ``waves`` (each a column's version, as is; a free column's split at its first
    known one). With ``complete_work`` (a deterministic limit, for profiles without presolve) every
    variable gets a value: a copy of the model with those choices fixed is solved with ``params``; where
    it finds none, the choices alone stay hinted. Returns whether the hint is complete."""
    keys = {layout_key(w) for w in waves}
    choices = {}
    for g, column in enumerate(owned.columns):
        choices[owned.as_is[g]] = int(layout_key(column.wave) in keys)
        if owned.free[g] is not None:
            choices[owned.free[g]] = 0
    for var, value in choices.items():
        owned.model.add_hint(var, value)
    if complete_work is None:
        return False
    return _complete_hint(owned, params or CpSatParams(), complete_work)


def _complete_hint(owned: OwnedModel, params: CpSatParams, work: float) -> bool:
    """Replace the model's (partial) hint by a full solution that agrees with it, when one is found
    (solved on a copy of the model: the model itself gains no constraint)."""
    proto = owned.model.proto.solution_hint
    fixed = dict(zip(proto.vars, proto.values, strict=True))
    copy = owned.model.clone()
    copy.clear_hints()
    for index, value in fixed.items():
        copy.add(copy.get_int_var_from_proto_index(index) == value)
    completer, status = run_on_work(copy, params, work)
    if not STATUSES.get(status, Status.UNKNOWN).answered:
        return False
    values = completer.response_proto.solution
    owned.model.clear_hints()
    owned.model.proto.solution_hint.vars.extend(range(len(values)))
    owned.model.proto.solution_hint.values.extend(values)
    return True


def solve_owned(
    owned: OwnedModel,
    params: CpSatParams,
    *,
    time_limit_s: float | None,
    deterministic: bool,
    relaxed: CpSatParams | None = None,
) -> OwnedAnswer:
    """Run CP-SAT on ``owned``; a free column chosen is re-priced by the evaluator under its new split.
    With ``relaxed`` (a deterministic budget's second run, ``ownership.relaxation_share``) an answer not
    proved optimal is searched on from, and the better kept; without an answer, the model is searched
    again under ``relaxed``. The objective reported is the answer's own:
    unproved, a time variable may keep slack, which overstates it and the model's gap, never the plan's
    price or the bound."""
    solver, status, wall = run_solver(
        owned.model, params, time_limit_s=time_limit_s, deterministic=deterministic
    )
    if relaxed is not None and status == cp_model.FEASIBLE:
        solver, status, wall = _search_on(owned, (solver, status, wall), relaxed)
    elif relaxed is not None and status == cp_model.UNKNOWN:  # no answer yet: the rest of the share
        solver, status, more = run_solver(owned.model, relaxed, time_limit_s=None, deterministic=True)
        wall += more
    name = STATUSES.get(status, Status.UNKNOWN)
    stage_s = {"search": wall}
    if not name.answered:
        outcome = ModelOutcome(model="ownership", status=name)
        return OwnedAnswer(plan=None, stats=run_stats(owned.model, solver, outcome, wall, stage_s))
    t0 = time.perf_counter()
    waves = _chosen_waves(owned, solver)
    stage_s["realize"] = time.perf_counter() - t0
    scaling = owned.scaling
    bound = _proven_bound_s(owned, solver)
    objective = scaling.seconds(solver.objective_value)
    outcome = ModelOutcome(
        model="ownership", status=name, objective_s=objective, bound_s=bound, bound_scope=Scope.PROPOSED_WAVES
    )
    stats = run_stats(owned.model, solver, outcome, wall, stage_s)
    stats = replace(stats, price_terms_s=price_terms(owned, solver, waves))
    plan = Plan(strategy="cpsat", waves=tuple(sorted(waves, key=lambda w: min(w.items))))
    return OwnedAnswer(plan=plan, stats=stats)


def _search_on(
    owned: OwnedModel, first: tuple[cp_model.CpSolver, int, float], params: CpSatParams
) -> tuple[cp_model.CpSolver, int, float]:
    """A second deterministic run on a copy of ``owned``'s model hinted with the ``first`` run's whole answer,
    under ``params``: its run where it answers at most as dear, else the first (the wall seconds of both)."""
    solver, _, wall = first
    model = owned.model.clone()
    model.clear_hints()
    for index, value in enumerate(solver.response_proto.solution):
        model.add_hint(model.get_int_var_from_proto_index(index), value)
    again, status, more = run_solver(model, params, time_limit_s=None, deterministic=True)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and again.objective_value <= solver.objective_value:
        return again, status, wall + more
    return first[0], first[1], wall + more


def price_terms(owned: OwnedModel, solved: cp_model.CpSolver, waves: Sequence[WavePlan]) -> dict[str, float]:
    """Per term, the evaluator's seconds for the chosen waves less the model's (each ``>= 0`` up to
    float error where the answer is proved optimal; an unproved one's slack counts negative):
    ``barriers`` and ``overhead`` (rounding down), ``handoff`` (rounding, and the rounds mode's
    waiting-token bound); a column taken as is counts wholly in ``barriers``."""
    unit = owned.scaling.seconds_per_unit
    card = owned.problem.card
    terms = {"barriers": 0.0, "handoff": 0.0, "overhead": 0.0}
    by_items = {tuple(sorted(w.items)): w for w in waves}
    for g, column in enumerate(owned.columns):
        as_is = solved.boolean_value(owned.as_is[g])
        free = owned.free[g] is not None and solved.boolean_value(owned.free[g])
        if not (as_is or free):
            continue
        wave = by_items[tuple(sorted(column.wave.items))]
        terms["overhead"] += card.wave_overhead_s - owned.overhead_units * unit
        if as_is:
            terms["barriers"] += (
                wave.prices.compute_s + wave.handoff.seconds - solved.value(owned.time[g]) * unit
            )
            continue
        fv = owned.free_vars[g]
        terms["barriers"] += wave.prices.compute_s - sum(solved.value(b) for b in fv.barrier) * unit
        modelled = solved.value(fv.handoff.units) * unit if fv.handoff is not None else 0.0
        terms["handoff"] += wave.handoff.seconds - modelled
    return {k: round(v, 9) for k, v in terms.items()}


def _chosen_waves(owned: OwnedModel, solver: cp_model.CpSolver) -> list[WavePlan]:
    """The chosen columns' waves: as proposed, or re-priced by the evaluator under their new split."""
    problem = owned.problem
    waves = []
    for g, column in enumerate(owned.columns):
        if solver.boolean_value(owned.as_is[g]):
            waves.append(column.wave)
        elif owned.free[g] is not None and solver.boolean_value(owned.free[g]):
            wave = column.wave
            owner = owned.free_vars[g].owners(solver)
            waves.append(
                price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner, split=wave.split)
            )
    return waves


def reordered(
    owned: OwnedModel,
    answer: OwnedAnswer,
    params: CpSatParams,
    *,
    time_limit_s: float | None,
    deterministic: bool,
    window_chunks: int,
) -> OwnedAnswer:
    """``answer`` after the ownership model's second pass: each wave of its plan, as is or re-split in
    the order of an ownership not contiguous in packed order, around it
    (:func:`~cpplan.cpsat.owned_model.reordered_column`): the wave's own, else its column's priced
    version's, else the proposers' balanced split's (:func:`_scattered`). A re-split wave is kept where
    the evaluator prices it lower and it fits, so the plan is never dearer than ``answer``'s. Where a
    wave is re-split, the objective reported is the pass's (it prices the plan kept) and the bound the
    lower of the two passes' (each bounds the plans of its own ownerships); the pass's time is
    ``stage_s["reorder"]``."""
    problem = owned.problem
    priced = {layout_key(column.wave): column.wave for column in owned.columns}
    columns = tuple(
        reordered_column(problem, wave, _scattered(problem, wave, priced.get(layout_key(wave), wave)))
        for wave in answer.plan.waves
    )
    if not any(column.free for column in columns):
        return answer
    again = compile_owned(problem, columns, window_chunks=window_chunks, scaling=owned.scaling)
    hint_plan(again, answer.plan.waves)
    solver, status, wall = run_solver(
        again.model, params, time_limit_s=time_limit_s, deterministic=deterministic
    )
    stats = replace(answer.stats, stage_s={**answer.stats.stage_s, "reorder": wall})
    if not STATUSES.get(status, Status.UNKNOWN).answered:
        return replace(answer, stats=stats)
    pairs = zip(answer.plan.waves, _chosen_waves(again, solver), strict=True)
    waves = tuple(
        new if new.cost_s < old.cost_s and new.fits(problem.memory_bytes) else old for old, new in pairs
    )
    if all(new is old for new, old in zip(waves, answer.plan.waves, strict=True)):
        return replace(answer, stats=stats)  # nothing re-split: the first pass's answer stands
    return OwnedAnswer(
        plan=replace(answer.plan, waves=waves), stats=_both_passes(stats, again, solver, waves)
    )


def _both_passes(stats: SolverStats, again: OwnedModel, solver: cp_model.CpSolver, waves) -> SolverStats:
    """``stats`` of the first pass with the second pass's objective (``again`` solved by ``solver``) and
    the lower of the two passes' bounds: proved optimal where that objective reaches it."""
    first = stats.outcomes[-1]
    objective = again.scaling.seconds(solver.objective_value)
    bound = min(_proven_bound_s(again, solver), first.bound_s)
    status = Status.OPTIMAL if objective <= bound * (1 + 1e-12) else Status.FEASIBLE
    outcome = replace(first, status=status, objective_s=objective, bound_s=bound)
    return replace(
        stats,
        outcomes=(*stats.outcomes[:-1], outcome),
        objective_s=objective,
        bound_s=bound,
        gap=outcome.gap,
        price_terms_s=price_terms(again, solver, waves),
    )


def _proven_bound_s(owned: OwnedModel, solver: cp_model.CpSolver) -> float:
    """What a run of ``owned`` proved, in seconds: the solver's bound, or the columns' cover bound
    (:func:`~cpplan.cpsat.owned_model.cover_bound`) where that is higher."""
    return owned.scaling.seconds(max(math.floor(solver.best_objective_bound + 1e-9), cover_bound(owned)))


def _scattered(problem: Problem, wave: WavePlan, priced: WavePlan) -> np.ndarray:
    """The first of the ownerships of ``wave``, of ``priced`` (its column's cheapest version) and of the
    proposers' balanced split (:func:`~cpplan.pricing.wave.balanced_ownership`, where it fits) that is
    not contiguous in packed order; ``wave``'s where none is."""
    if not is_rank_ordered(wave.owner) or problem.topology.cp == 1:
        return wave.owner
    if not is_rank_ordered(priced.owner):
        return priced.owner
    owner = balanced_ownership(problem, wave.stats)
    if owner is None or is_rank_ordered(owner):
        return wave.owner
    balanced = price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner, split=wave.split)
    return owner if balanced.fits(problem.memory_bytes) else wave.owner
