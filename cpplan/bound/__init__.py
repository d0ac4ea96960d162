"""Lower bounds on the price of every valid plan of a problem (:func:`plan_bound`), each with its scope:
``"all plans"`` or ``"proposed waves"``."""

from cpplan.bound.all_plans import (
    ALL_PLANS,
    BOUND_SCOPES,
    PROPOSED_WAVES,
    PlanBound,
    plan_bound,
    pool_scoped_stats,
    scoped_stats,
)

__all__ = [
    "ALL_PLANS",
    "BOUND_SCOPES",
    "PROPOSED_WAVES",
    "PlanBound",
    "plan_bound",
    "pool_scoped_stats",
    "scoped_stats",
]
