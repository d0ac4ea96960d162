"""Planner backends behind one interface: ``(problem, profile, deadline) -> (Plan, SolverStats | None)``.

Each strategy named in a solver profile is looked up here. Backends register themselves with
:func:`register`; the portfolio in :mod:`cpplan.api` runs them in the profile's order.
"""

from __future__ import annotations

from collections.abc import Callable

from ..problem import Problem
from ..profile import SolverProfile
from ..result import Plan, SolverStats
from .greedy import full_sharing_plan, greedy_plan

Planner = Callable[[Problem, SolverProfile, float], tuple[Plan, SolverStats | None]]
PLANNERS: dict[str, Planner] = {}


def register(name: str, planner: Planner) -> None:
    """Make ``planner`` available as strategy ``name``."""
    PLANNERS[name] = planner


def _greedy(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    return greedy_plan(problem, profile.greedy.layouts), None


def _full_sharing(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    return full_sharing_plan(problem), None


register("greedy", _greedy)
register("full_sharing", _full_sharing)


def _seeded(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    from ..baselines.seeded import seeded_plan

    return seeded_plan(problem, profile.greedy.layouts), None


register("seeded", _seeded)
