"""The public entry points: ``plan`` (the portfolio) and ``verify``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cpplan.errors import CpplanError, InputError, NoFitError
from cpplan.planners import PLANNERS, Planner
from cpplan.pricing.problem import Problem, check_static_floor
from cpplan.pricing.result import Candidate, Plan, PlanResult, SolverStats
from cpplan.pricing.serialize import plan_to_dict
from cpplan.spec.card import ModelCard, Phase, load_model
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.topology import Topology
from cpplan.spec.units import parse_bytes
from cpplan.spec.workload import Workload
from cpplan.verifier import Verification, verify_plan

DISAGREEMENT_TOLERANCE = 0.05
"""Relative gap between a solver's objective and the verified price above which the result notes it."""


def _card_and_memory(model: ModelCard | str | Path, memory_bytes: int | str) -> tuple[ModelCard, int]:
    _check_type(model, ModelCard | str | Path, "model", "a ModelCard, a shipped card name or a .toml path")
    card = model if isinstance(model, ModelCard) else load_model(model)
    return card, parse_bytes(memory_bytes) if isinstance(memory_bytes, str) else memory_bytes


def build_problem(
    workload: Workload,
    *,
    topology: Topology | None = None,
    model: ModelCard | str | Path,
    memory_bytes: int | str,
    num_layers: int | None = None,
    phase: Phase = "cold",
) -> Problem:
    """Validate and assemble a :class:`Problem` from user-level arguments."""
    _check_type(workload, Workload, "workload", "a cpplan.Workload (read a file with Workload.from_jsonl)")
    _check_type(topology, Topology | None, "topology", "a cpplan.Topology (or Topology.parse('cp=4'))")
    card, memory = _card_and_memory(model, memory_bytes)
    return Problem.build(
        workload,
        topology=topology or Topology(),
        model=card,
        memory_bytes=memory,
        num_layers=num_layers,
        phase=phase,
    )


def plan(
    workload: Workload,
    *,
    topology: Topology | None = None,
    model: ModelCard | str | Path,
    memory_bytes: int | str,
    solver: SolverProfile | str | Path | None = None,
    num_layers: int | None = None,
    phase: Phase = "cold",
    time_budget_s: float | None = None,
    planners: Mapping[str, Planner] | None = None,
) -> PlanResult:
    """Plan ``workload``: run the profile's strategies, verify each plan independently, keep the
    cheapest valid one. Raises :class:`NoFitError` when no strategy yields a valid plan."""
    started = time.perf_counter()
    problem = build_problem(
        workload,
        topology=topology,
        model=model,
        memory_bytes=memory_bytes,
        num_layers=num_layers,
        phase=phase,
    )
    _check_type(solver, SolverProfile | str | Path | None, "solver", "a SolverProfile, a name or a path")
    profile = solver if isinstance(solver, SolverProfile) else load_solver(solver or "runtime")
    profile = profile.with_time_budget(time_budget_s)
    return solve(problem, profile, planners=planners, started=started)


def solve(
    problem: Problem,
    profile: SolverProfile,
    *,
    planners: Mapping[str, Planner] | None = None,
    started: float | None = None,
) -> PlanResult:
    """The portfolio over an already built problem."""
    started = time.perf_counter() if started is None else started
    check_static_floor(problem.card, problem.budget_bytes)
    deadline = started + profile.time_budget_s
    backends = {**PLANNERS, **(planners or {})}
    outcomes: list[tuple[str, Plan | None, Verification | None, str, float]] = []
    refusal: NoFitError | None = None
    stats = SolverStats(status="not_run")
    verified: list[tuple[dict[str, Any], Verification]] = []
    for strategy in profile.strategies:
        backend = backends.get(strategy)
        t0 = time.perf_counter()
        if backend is None:
            outcomes.append((strategy, None, None, "backend not available", 0.0))
            continue
        try:
            candidate, solver_stats = backend(problem, profile, deadline)
        except NoFitError as exc:
            refusal = refusal or exc
            outcomes.append((strategy, None, None, f"refused: {exc}", time.perf_counter() - t0))
            continue
        except CpplanError as exc:
            outcomes.append((strategy, None, None, f"failed: {exc}", time.perf_counter() - t0))
            continue
        except Exception as exc:  # a faulty backend costs time, never the plan
            outcomes.append(
                (strategy, None, None, f"raised {type(exc).__name__}: {exc}", time.perf_counter() - t0)
            )
            continue
        if solver_stats is not None:
            stats = solver_stats
        if candidate is None:
            why = f"no solution ({solver_stats.status})" if solver_stats else "no solution within its time"
            outcomes.append((strategy, None, None, why, time.perf_counter() - t0))
            continue
        t_verify = time.perf_counter()
        try:
            data = plan_to_dict(problem, candidate)
            data.pop("strategy")
            # A plan identical to one already verified (strategies often agree) gets the same verdict.
            verdict = next((v for d, v in verified if d == data), None)
            if verdict is None:
                verdict = verify_plan(
                    data,
                    problem.workload,
                    problem.card,
                    problem.budget_bytes,
                    chunk_tokens=problem.chunk_tokens,
                )
                verified.append((data, verdict))
        except Exception as exc:  # a malformed plan object is a failed strategy, not a crash
            reason = f"returned an unreadable plan ({type(exc).__name__}: {exc})"
            outcomes.append((strategy, None, None, reason, time.perf_counter() - t0))
            continue
        if solver_stats is not None:
            verify_s = stats.stage_s.get("verify", 0.0) + time.perf_counter() - t_verify
            stats = replace(stats, stage_s={**stats.stage_s, "verify": verify_s})
        note = _disagreement(solver_stats, verdict)
        outcomes.append((strategy, candidate, verdict, note, time.perf_counter() - t0))
    valid = [(s, p, v) for s, p, v, _, _ in outcomes if p is not None and v is not None and v.valid]
    if not valid:
        if refusal is not None:
            raise refusal
        reasons = "; ".join(f"{s}: {r or (v.violations[0] if v else '?')}" for s, _, v, r, _ in outcomes)
        raise NoFitError(f"no strategy produced a valid plan ({reasons})")
    winner_strategy, winner, winner_verdict = min(valid, key=lambda x: x[2].cost_s)
    candidates = []
    for strategy, candidate, verdict, reason, wall in outcomes:
        if candidate is None or verdict is None:
            candidates.append(
                Candidate(strategy=strategy, cost_s=None, valid=False, reason=reason, wall_s=wall)
            )
            continue
        if not verdict.valid:
            why = f"invalid: {verdict.violations[0]}" + (
                f" (+{len(verdict.violations) - 1} more)" if len(verdict.violations) > 1 else ""
            )
            why += f"; {reason}" if reason else ""
        elif strategy == winner_strategy:
            why = "chosen: cheapest valid plan"
        else:
            why = (
                f"costs {verdict.cost_s:.6f} s, not below the chosen {winner_verdict.cost_s:.6f} s"
                if verdict.cost_s >= winner_verdict.cost_s
                else "tied"
            )
        if verdict.valid and reason:
            why += f"; {reason}"
        candidates.append(
            Candidate(
                strategy=strategy,
                cost_s=verdict.cost_s,
                valid=verdict.valid,
                reason=why,
                wall_s=wall,
                num_waves=candidate.num_waves,
            )
        )
    return PlanResult(
        problem=problem,
        plan=winner,
        candidates=tuple(candidates),
        solver=stats,
        profile=profile.name,
        wall_s=time.perf_counter() - started,
    )


def _check_type(value: Any, expected: Any, field: str, wanted: str) -> None:
    if not isinstance(value, expected):
        raise InputError(f"must be {wanted}, got {type(value).__name__}", field=field)


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


def verify(
    plan_data: dict[str, Any] | PlanResult,
    workload: Workload,
    *,
    topology: Topology | None = None,
    model: ModelCard | str | Path,
    memory_bytes: int | str,
    num_layers: int | None = None,
    phase: Phase = "cold",
) -> Verification:
    """Check a plan (its JSON dictionary or a :class:`PlanResult`) against a workload and card."""
    card, memory = _card_and_memory(model, memory_bytes)
    resolved = card.resolve(topology or Topology(), num_layers=num_layers, phase=phase)
    if isinstance(plan_data, PlanResult):
        plan_data = plan_to_dict(plan_data.problem, plan_data.plan)
    return verify_plan(plan_data, workload, resolved, memory)
