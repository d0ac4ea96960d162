"""The peers ``cpplan bench`` compares: the other trainers' packers (:data:`cpplan.baselines.BASELINES`)
and cpplan's own planners as baselines, the greedy exact planner and the full-sharing fallback.

cpplan's own price every candidate wave exactly, so neither ever admits a wave over the budget; when a
single item fits no wave they refuse (:class:`cpplan.errors.NoFitError`) instead of planning it.
"""

from __future__ import annotations

from cpplan.baselines import BASELINES, Baseline
from cpplan.planners.greedy import full_sharing_plan, greedy_plan
from cpplan.plans.plan import Plan
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import GreedyParams

GREEDY_LAYOUTS = GreedyParams().layouts


def greedy(problem: Problem) -> Plan:
    """The greedy exact planner with the runtime profile's layouts."""
    return greedy_plan(problem, GREEDY_LAYOUTS, strategy="cpplan_greedy")


def full_sharing(problem: Problem) -> Plan:
    """The greedy planner restricted to full sharing (the memory-minimal layout)."""
    plan = full_sharing_plan(problem)
    return Plan(strategy="cpplan_full_sharing", waves=plan.waves)


GREEDY = Baseline(
    name="cpplan_greedy",
    origin="cpplan",
    summary="items in order, widest fitting waves, cheapest of full/none/min_span:512, exact pricing",
    plan=greedy,
)
FULL_SHARING = Baseline(
    name="cpplan_full_sharing",
    origin="cpplan",
    summary="the greedy planner with full prefix sharing only (the memory-minimal layout)",
    plan=full_sharing,
)

PEERS: dict[str, Baseline] = {**BASELINES, GREEDY.name: GREEDY, FULL_SHARING.name: FULL_SHARING}
"""Every baseline ``cpplan bench`` runs beside the portfolio, by name."""
