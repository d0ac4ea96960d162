"""Planner backends behind one interface: ``(problem, profile, deadline) -> (plan or None, stats or None)``.

:data:`PLANNERS` is the explicit, ordered table of strategies a solver profile may name; the portfolio
in :mod:`cpplan.api` runs the profile's strategies in the profile's order.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cpplan.planners.cpsat_strategy import cpsat_planner
from cpplan.planners.greedy import cached_greedy_plan, full_sharing_plan
from cpplan.planners.seeded import seeded_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import Plan, SolverStats
from cpplan.spec.profile import SolverProfile

Planner = Callable[[Problem, SolverProfile, float], tuple[Plan | None, SolverStats | None]]

SEEDED_SHARE = 0.5
"""The share of the time left that the seeded strategy may start seeds in, under a wall-clock budget."""


def _greedy(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    return cached_greedy_plan(problem, profile.greedy.layouts), None


def _full_sharing(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    return full_sharing_plan(problem), None


def _seeded(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan | None, None]:
    if profile.deterministic:
        return seeded_plan(problem, profile.greedy.layouts), None
    now = time.perf_counter()
    return seeded_plan(problem, profile.greedy.layouts, stop_at=now + SEEDED_SHARE * (deadline - now)), None


PLANNERS: dict[str, Planner] = {
    "greedy": _greedy,
    "full_sharing": _full_sharing,
    "seeded": _seeded,
    "cpsat": cpsat_planner,
}
"""Every strategy a profile may name, in the order of :data:`cpplan.spec.profile.STRATEGIES`."""
