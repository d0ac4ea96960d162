"""Planner backends behind one interface: ``(problem, profile, deadline) -> (plan or None, stats or None)``.

:data:`PLANNERS` is the explicit, ordered table of strategies a solver profile may name; the portfolio
(:func:`cpplan.planners.portfolio.solve`) runs the profile's strategies in the profile's order, all
against one :class:`~cpplan.planners.deadline.Deadline`.
"""

from __future__ import annotations

from collections.abc import Callable

from cpplan.planners.cpsat_strategy import cpsat_planner
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import cached_greedy_plan, full_sharing_plan
from cpplan.planners.seeded import seeded_plan
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import Plan, SolverStats
from cpplan.spec.profile import SolverProfile

Strategy = Callable[[Problem, SolverProfile, Deadline], tuple[Plan | None, SolverStats | None]]

SEEDED_SHARE = 0.5
"""The share of the time left that the seeded strategy may start seeds in (a deterministic deadline
has no share to take: every seed runs)."""


def _greedy(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan, None]:
    return cached_greedy_plan(problem, profile.greedy.layouts, deadline), None


def _full_sharing(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan, None]:
    return full_sharing_plan(problem, deadline), None


def _seeded(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan | None, None]:
    return seeded_plan(problem, profile.greedy.layouts, deadline=deadline.share(SEEDED_SHARE)), None


PLANNERS: dict[str, Strategy] = {
    "greedy": _greedy,
    "full_sharing": _full_sharing,
    "seeded": _seeded,
    "cpsat": cpsat_planner,
}
"""Every strategy a profile may name, in the order of :data:`cpplan.spec.profile.STRATEGIES`."""
