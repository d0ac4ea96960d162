"""CP-SAT's two stages as the planner runs them: :func:`joint_proposal`, the CP-SAT proposer (the joint model
warm-started from the greedy plan, or above ``joint.max_items`` its window search,
:mod:`cpplan.planners.lns`); and :func:`cpsat_planner`, the registered ``cpsat`` strategy on its own (outside
the planner's loop): the ownership model (:mod:`cpplan.planners.decide`) over the greedy and joint plans.
"""

from __future__ import annotations

from cpplan.planners.budget import Budget
from cpplan.planners.cpsat_strategy import joint_plan, not_run
from cpplan.planners.deadline import Deadline
from cpplan.planners.decide import Pool, decide
from cpplan.planners.greedy import cached_greedy_plan
from cpplan.planners.lns import lns_plan
from cpplan.plans.outcome import Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile


def joint_proposal(
    problem: Problem, budget: Budget, greedy: Plan, deadline: Deadline
) -> tuple[Plan | None, SolverStats]:
    """The joint model's proposal from ``greedy`` (its hint and columns) before ``deadline``, within
    the joint stage's share of ``budget``: the whole model up to ``joint.max_items`` items, its window
    search above; skipped where greedy splits an item (the model has no split path)."""
    profile = budget.profile
    work = budget.work_limit(profile.joint.share)
    if problem.num_items > profile.joint.max_items:
        return lns_plan(problem, profile, greedy, deadline, work)
    if greedy.splits_an_item:
        why = "the greedy plan splits an item (not modelled)"
        return None, not_run("joint", Status.SKIPPED, why)
    return joint_plan(problem, profile, greedy, deadline, budget.cpsat_params(profile.joint.share))


def cpsat_planner(
    problem: Problem, profile: SolverProfile, deadline: Deadline
) -> tuple[Plan | None, SolverStats]:
    """Registered as strategy ``cpsat``: the joint model's proposal from the greedy plan, then the ownership
    model over the greedy and joint plans, in the budget of ``profile`` ending at ``deadline``."""
    budget = Budget.start(problem, profile, deadline)
    greedy = cached_greedy_plan(problem, profile.greedy.layouts, budget.verify_by)
    joint_by = budget.stage(profile.joint.share, budget.proposers_by())
    proposed, stats = joint_proposal(problem, budget, greedy, joint_by)
    return decide(problem, Pool.of({"greedy": greedy, "joint": proposed}, stats), budget, budget.verify_by)
