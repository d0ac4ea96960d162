"""The registered ``cpsat`` strategy: the joint model of :mod:`cpplan.planners.cpsat_strategy`
warm-started from the greedy plan, or, above the profile's ``max_items``, large-neighbourhood search over
the greedy plan's waves (:mod:`cpplan.planners.lns`), proposes waves; the ownership model
(:mod:`cpplan.planners.owned_strategy`) decides which proposed waves run and who owns their chunks."""

from __future__ import annotations

from cpplan.planners.cpsat_strategy import joint_plan
from cpplan.planners.deadline import Deadline
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.lns import lns_plan
from cpplan.planners.owned_strategy import owned_plan, proposals
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile


def cpsat_planner(
    problem: Problem, profile: SolverProfile, deadline: Deadline
) -> tuple[Plan | None, SolverStats]:
    """Registered as strategy ``cpsat``: the joint model warm-started from the greedy plan, or, above
    the profile's ``max_items``, large-neighbourhood search over the greedy plan's waves
    (:func:`~cpplan.planners.lns.lns_plan`)."""
    greedy = cached_greedy_plan(problem, profile.greedy.layouts, deadline)
    if problem.num_items > profile.cpsat.max_items:
        proposed = lns_plan(problem, profile, greedy, deadline)
    elif any(wave.split for wave in greedy.waves):
        return None, SolverStats(status="skipped: the greedy plan splits an item (not modelled)")
    else:
        proposed = joint_plan(problem, profile, greedy, deadline)
    return owned_plan(problem, profile, deadline, proposed, proposals(problem, proposed[0], greedy))
