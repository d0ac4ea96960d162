"""The planner a trainer keeps for a run: settings and profile resolved once, one plan per step.

``Planner(model=..., topology=..., memory_bytes=..., solver="runtime")`` loads the card, parses the
memory size, resolves the card for the topology, depth and phase, and loads the solver profile once;
it also derives, once, what every step reads from them (the card's coefficient vectors,
:func:`~cpplan.pricing.memo.card_constants`) and, when the profile runs CP-SAT, imports OR-Tools and
runs one trivial solve, so that the first step pays neither. ``planner.plan(workload)`` then builds
the step's problem and runs the portfolio (:func:`cpplan.planners.portfolio.solve`) within the
profile's time budget (or the one given), counted from the call. :func:`cpplan.plan` is the one-shot
form: a planner made for a single call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from numbers import Real
from pathlib import Path

from cpplan.errors import InputError
from cpplan.planners import Strategy
from cpplan.planners.cpsat_strategy import ensure_solver
from cpplan.planners.deadline import Deadline
from cpplan.planners.portfolio import solve
from cpplan.pricing.memo import card_constants
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import PlanResult
from cpplan.spec.card import ModelCard, Phase
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload


class Planner:
    """Plans one workload per call under fixed settings and a solver profile.

    Everything that does not change between steps (the card and its resolution, the profile) is
    loaded and checked when the planner is made, so a bad card or profile fails here, not mid-run.
    """

    def __init__(
        self,
        *,
        model: ModelCard | str | Path,
        topology: Topology | str | None = None,
        memory_bytes: int | str,
        solver: SolverProfile | str | Path = "runtime",
        num_layers: int | None = None,
        phase: Phase = "cold",
    ) -> None:
        self.settings = Settings.from_user(
            topology=topology, model=model, memory_bytes=memory_bytes, num_layers=num_layers, phase=phase
        )
        self.profile = resolve_profile(solver)
        self.card = self.settings.card
        """The card resolved for these settings (a card that cannot price them fails here)."""
        card_constants(self.card)
        self._profiles: dict[float, SolverProfile] = {}
        if "cpsat" in self.profile.strategies:
            ensure_solver()

    def plan(
        self,
        workload: Workload,
        time_budget_s: float | None = None,
        *,
        planners: Mapping[str, Strategy] | None = None,
        started_s: float | None = None,
    ) -> PlanResult:
        """Plan ``workload`` within ``time_budget_s`` (default: the profile's; a positive, finite number
        of seconds, else :class:`~cpplan.errors.InputError`), counted from ``started_s`` (a
        :func:`time.perf_counter` instant; default: this call). ``planners`` replaces or adds strategies
        by name. A budget too short for the search still gets a complete plan: the portfolio packs it at
        once with full sharing and its candidates say so. Raises :class:`~cpplan.errors.NoFitError` when
        no strategy yields a valid plan."""
        started = time.perf_counter() if started_s is None else started_s
        if not isinstance(workload, Workload):
            raise InputError(
                "must be a cpplan.Workload (read a file with Workload.from_jsonl), "
                f"got {type(workload).__name__}",
                field="workload",
            )
        profile = self._profile_for(time_budget_s)
        deadline = Deadline.after(profile.time_budget_s, deterministic=profile.deterministic, start_s=started)
        return solve(Problem.build(workload, self.settings), profile, planners=planners, deadline=deadline)

    def _profile_for(self, time_budget_s: float | None) -> SolverProfile:
        """The profile with ``time_budget_s`` (checked), made once per distinct budget."""
        if time_budget_s is None:
            return self.profile
        seconds = checked_time_budget(time_budget_s)
        if seconds not in self._profiles:
            self._profiles[seconds] = self.profile.with_time_budget(seconds)
        return self._profiles[seconds]

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"Planner(model={s.model.name!r}, topology='{s.topology}', memory_bytes={s.memory_bytes}, "
            f"solver={self.profile.name!r}, num_layers={s.num_layers}, phase={s.phase!r})"
        )


def resolve_profile(solver: SolverProfile | str | Path | None) -> SolverProfile:
    """A solver profile as given, or loaded by name or path (``None``: ``runtime``); anything else is
    an :class:`~cpplan.errors.InputError` naming the field."""
    if not isinstance(solver, SolverProfile | str | Path | None):
        raise InputError(
            f"must be a SolverProfile, a name or a path, got {type(solver).__name__}", field="solver"
        )
    return solver if isinstance(solver, SolverProfile) else load_solver(solver or "runtime")


def checked_time_budget(seconds: object) -> float:
    """A time budget as float seconds; anything but a positive, finite number is an
    :class:`~cpplan.errors.InputError` naming the field."""
    if isinstance(seconds, bool) or not isinstance(seconds, Real):
        raise InputError(
            f"must be a positive number of seconds, got {type(seconds).__name__} {seconds!r}",
            field="time_budget",
        )
    value = float(seconds)
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"must be a positive number of seconds, got {value}", field="time_budget")
    return value
