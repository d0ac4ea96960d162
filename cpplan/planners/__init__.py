"""Planner backends behind one interface: ``(problem, profile, deadline) -> (plan or None, stats or None)``.

Each strategy named in a solver profile is looked up here. Backends register themselves with
:func:`register`; the portfolio in :mod:`cpplan.api` runs them in the profile's order.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..problem import Problem
from ..profile import SolverProfile
from ..result import Plan, SolverStats
from .greedy import cached_greedy_plan, full_sharing_plan

Planner = Callable[[Problem, SolverProfile, float], tuple[Plan | None, SolverStats | None]]
PLANNERS: dict[str, Planner] = {}


def register(name: str, planner: Planner) -> None:
    """Make ``planner`` available as strategy ``name``."""
    PLANNERS[name] = planner


def _greedy(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    return cached_greedy_plan(problem, profile.greedy.layouts), None


def _full_sharing(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan, None]:
    return full_sharing_plan(problem), None


register("greedy", _greedy)
register("full_sharing", _full_sharing)


SEEDED_SHARE = 0.5
"""The share of the time left that the seeded strategy may start seeds in, under a wall-clock budget."""


def _seeded(problem: Problem, profile: SolverProfile, deadline: float) -> tuple[Plan | None, None]:
    from ..baselines.seeded import seeded_plan

    if profile.deterministic:
        return seeded_plan(problem, profile.greedy.layouts), None
    now = time.perf_counter()
    return seeded_plan(problem, profile.greedy.layouts, stop_at=now + SEEDED_SHARE * (deadline - now)), None


register("seeded", _seeded)

from .cpsat import cpsat_planner  # noqa: E402  (it builds on the greedy planner above)

register("cpsat", cpsat_planner)
