"""Proposal packers: the wave groupings other trainers make, written from their published descriptions,
behind one interface (:class:`Baseline`: a name and ``plan(problem) -> Plan``).

Every baseline's plan is a :class:`cpplan.plans.plan.Plan` of priced waves, so cpplan's evaluator prices
it and cpplan's verifier checks it exactly as it does cpplan's own. A wave that breaks the per-rank budget is
kept and reported as an :class:`Oom` (wave, rank, bytes), never repaired. This package sits below the
planners (the ``seeded`` strategy repairs these proposals); the peer comparison of ``cpplan bench``
(with cpplan's own planners and Megatron's dynamic CP as peers) is in :mod:`cpplan.bench`.
"""

from __future__ import annotations

from cpplan.baselines import axolotl, megatron, prefix_grouper, trl, verl
from cpplan.baselines.base import (
    Baseline,
    Oom,
    Outcome,
    build_plan,
    check,
    cold_copy,
    find_ooms,
    other_violations,
    outcome_of,
    run,
    timed,
)
from cpplan.baselines.capacity import per_gpu_token_capacity, token_capacity

BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        verl.BASELINE,
        axolotl.BASELINE,
        trl.BASELINE,
        megatron.BASELINE,
        prefix_grouper.BASELINE,
    )
}

__all__ = [
    "BASELINES",
    "Baseline",
    "Oom",
    "Outcome",
    "build_plan",
    "check",
    "cold_copy",
    "find_ooms",
    "other_violations",
    "outcome_of",
    "per_gpu_token_capacity",
    "run",
    "timed",
    "token_capacity",
]
