"""Plans and their JSON: the plan, result and schedule types the planners make from a
:class:`~cpplan.pricing.problem.Problem`'s priced waves, and the plan-JSON writer and reader with their
one field schema (:mod:`~cpplan.plans.plan_fields`)."""
