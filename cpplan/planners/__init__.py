"""The planner's strategies behind one interface: ``(problem, profile, deadline) -> (plan or None, stats
or None)``.

:data:`PLANNERS` is the explicit table of strategies a solver profile may name, each usable on its own.
The planner's loop (:func:`cpplan.planners.portfolio.solve`) runs the proposers among them, hands every
proposal to the ownership model in one pool, and, where a plan's waves share a pool of CP groups,
runs each strategy as placed here.
"""

from __future__ import annotations

from collections.abc import Callable

from cpplan.errors import NoFitError
from cpplan.planners.cpsat_planner import cpsat_planner
from cpplan.planners.deadline import Deadline
from cpplan.planners.dynamic_cp import at_each_size, cached_dynamic_plan, group_problem, pool_padding_s
from cpplan.planners.greedy import cached_greedy_plan, full_sharing_plan
from cpplan.planners.seeded import seeded_plan
from cpplan.plans.plan import Plan, SolverStats, balanced
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile

Strategy = Callable[[Problem, SolverProfile, Deadline], tuple[Plan | None, SolverStats | None]]


def _greedy(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan, None]:
    if problem.topology.several_groups:
        return cached_dynamic_plan(problem, profile.greedy.layouts, deadline=deadline), None
    return cached_greedy_plan(problem, profile.greedy.layouts, deadline), None


def _full_sharing(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan, None]:
    return full_sharing_plan(problem, deadline), None


def _seeded(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan | None, None]:
    return seeded_plan(problem, profile.greedy.layouts, deadline=deadline.share(profile.seeded.share)), None


def _cpsat(problem: Problem, profile: SolverProfile, deadline: Deadline) -> tuple[Plan | None, SolverStats]:
    if problem.topology.several_groups:
        return _dynamic_cpsat(problem, profile, deadline)
    return cpsat_planner(problem, profile, deadline)


def _dynamic_cpsat(
    problem: Problem, profile: SolverProfile, deadline: Deadline
) -> tuple[Plan | None, SolverStats]:
    from cpplan.planners.schedule_strategy import dynamic_cpsat_planner  # imports OR-Tools: when used

    return dynamic_cpsat_planner(problem, profile, deadline)


def at_every_size(strategy: Strategy, dynamic: Strategy | None = None) -> Strategy:
    """Under dynamic CP: ``strategy`` run as the fixed-CP strategy of every group size (on the group problems,
    each plan balanced over the pool; the topology's ``cp`` first), and ``dynamic`` (when given) on the pool
    itself; the plan of least makespan (ties to the earlier), with the statistics of the last run that had
    any. So a dynamic plan is never costlier than the same strategy's plan at any fixed CP size of the pool; a
    wall-clock deadline stops the runs once one has a plan. Elsewhere, ``strategy`` itself."""

    def run(problem: Problem, profile: SolverProfile, deadline: Deadline):
        if not problem.topology.dynamic_cp:
            return strategy(problem, profile, deadline)
        stats: list[SolverStats] = []

        def plan_of(planner: Strategy, target: Problem) -> Plan | None:
            plan, found = planner(target, profile, deadline)
            stats.extend([found] if found is not None else [])
            return None if plan is None else balanced(plan, problem.topology.pool, pool_padding_s(problem))

        def at_size(size: int) -> Plan | None:
            return plan_of(strategy, group_problem(problem, size))

        plans, refusal = at_each_size(problem, at_size, deadline)
        if dynamic is not None and not (plans and deadline.expired()):
            try:
                plans += [plan for plan in [plan_of(dynamic, problem)] if plan is not None]
            except NoFitError as exc:  # the pool itself cannot hold some request
                refusal = exc
        if not plans and refusal is not None and not stats:
            raise refusal
        return (min(plans, key=lambda plan: plan.cost_s) if plans else None), (stats[-1] if stats else None)

    run.__doc__ = strategy.__doc__
    return run


def placed(strategy: Strategy) -> Strategy:
    """``strategy`` with its plan's waves balanced over the pool's CP groups when the topology has
    several (``dp > 1`` or dynamic CP; a plan that already has a schedule keeps it)."""

    def run(problem: Problem, profile: SolverProfile, deadline: Deadline):
        plan, stats = strategy(problem, profile, deadline)
        if plan is not None and problem.topology.several_groups:
            plan = balanced(plan, problem.topology.pool, pool_padding_s(problem))
        return plan, stats

    run.__doc__ = strategy.__doc__
    return run


PLANNERS: dict[str, Strategy] = {
    "greedy": placed(_greedy),
    "full_sharing": at_every_size(placed(_full_sharing)),
    "seeded": at_every_size(placed(_seeded)),
    "cpsat": at_every_size(placed(_cpsat), placed(_dynamic_cpsat)),
}
"""Every strategy a profile may name, in the order of :data:`cpplan.spec.profile.STRATEGIES`. Where the
pool holds several CP groups the cost is the makespan: ``greedy`` and ``cpsat`` form and place waves for
it (:mod:`cpplan.planners.dynamic_cp`, :mod:`cpplan.planners.schedule_strategy`), every plan is balanced
over the pool, and under dynamic CP every strategy also runs at each fixed group size
(:func:`at_every_size`), padding waves counted under equal waves."""
