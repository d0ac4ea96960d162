"""The public entry points: ``build_problem``, ``plan``, ``solve`` (the portfolio) and ``verify``.

``build_problem``, ``plan`` and ``verify`` take user-level values (a card name or path, a size string,
...), turn them into one :class:`~cpplan.spec.settings.Settings` and hand that on; ``solve`` is the
portfolio itself (:func:`cpplan.planners.portfolio.solve`), over an already built
:class:`~cpplan.pricing.problem.Problem`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cpplan.calibration.planner_state import settings_for_plan
from cpplan.errors import InputError
from cpplan.planner import Planner, resolve_profile
from cpplan.planners import Strategy
from cpplan.planners.cpsat_strategy import ensure_solver
from cpplan.planners.portfolio import solve
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.plans.result import PlanResult
from cpplan.pricing.problem import Problem
from cpplan.spec.card import ModelCard, Phase
from cpplan.spec.profile import SolverProfile
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload
from cpplan.verifier import Verification, verify_plan

__all__ = ["build_problem", "plan", "solve", "verify"]


def build_problem(
    workload: Workload,
    *,
    topology: Topology | None = None,
    model: ModelCard | str | Path,
    memory_bytes: int | str,
    num_layers: int | None = None,
    phase: Phase = "cold",
) -> Problem:
    """Validate and assemble a :class:`Problem` from user-level arguments
    (:meth:`Settings.from_user`, then :meth:`Problem.build`)."""
    _check_workload(workload)
    settings = Settings.from_user(
        topology=topology, model=model, memory_bytes=memory_bytes, num_layers=num_layers, phase=phase
    )
    return Problem.build(workload, settings)


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
    planners: Mapping[str, Strategy] | None = None,
) -> PlanResult:
    """Plan ``workload`` once (:meth:`cpplan.Planner.plan` of a planner made for one call, so under
    ``dp > 1`` with the runtime or trainer profile every replica's share is planned and the step
    assembled): run the profile's strategies, verify each plan independently, keep the cheapest valid
    one. The time budget counts from after a first call in a process has imported OR-Tools and warmed
    CP-SAT up. Raises :class:`NoFitError` when no strategy yields a valid plan."""
    profile = resolve_profile(solver)
    if "cpsat" in profile.strategies:
        ensure_solver()  # once per process, outside the budget
    started = time.perf_counter()
    _check_workload(workload)
    planner = Planner(
        model=model,
        topology=topology,
        memory_bytes=memory_bytes,
        solver=profile,
        num_layers=num_layers,
        phase=phase,
    )
    return planner.plan(workload, time_budget_s, planners=planners, started_s=started)


def _check_workload(workload: object) -> None:
    if not isinstance(workload, Workload):
        raise InputError(
            "must be a cpplan.Workload (read a file with Workload.from_jsonl), "
            f"got {type(workload).__name__}",
            field="workload",
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
    learned: str | Path | None = None,
) -> Verification:
    """Check a plan (its JSON dictionary or a :class:`PlanResult`) against a workload and card. A plan
    priced with a learned correction is checked against that correction: the saved planner state's
    when ``learned`` names one (``Planner.save``), else the one the plan records."""
    settings = Settings.from_user(
        topology=topology, model=model, memory_bytes=memory_bytes, num_layers=num_layers, phase=phase
    )
    if isinstance(plan_data, PlanResult):
        plan_data = plan_to_dict(plan_data.problem, plan_data.plan)
    card = settings_for_plan(plan_data, settings, learned=learned).card
    return verify_plan(plan_data, workload, card, settings.memory_bytes)
