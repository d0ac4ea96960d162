"""Each pool rank's work: which waves a GPU of the ``dp * cp`` pool runs, as which wave rank, in order.

A plan's waves carry their pool ranks (``gpus``: rank ``r`` of the wave runs on ``gpus[r]``) and their
starts (``start_s``); a GPU runs the waves whose groups hold it, in order of their starts (plan order
among equal starts). Plans without a schedule (one CP group, ``dp = 1``) run every wave on ranks
``0 .. cp - 1``; plan JSON written before schedules deals waves round-robin to the replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpplan.errors import InputError
from cpplan.plans.plan import Plan
from cpplan.plans.plan_reader import plan_waves, rank_waves, read_plan_file
from cpplan.plans.pool_schedule import pool_rank_waves
from cpplan.plans.result import PlanResult
from cpplan.runtime.materialize import RankBatch, materialize
from cpplan.spec.workload import Workload

PlanLike = Plan | PlanResult | dict[str, Any] | str | Path


def pool_waves(plan: PlanLike, pool_rank: int) -> list[tuple[int, int]]:
    """The ``(wave, wave rank)`` pairs that GPU ``pool_rank`` of the pool runs, in schedule order."""
    if isinstance(plan, PlanResult):
        plan = plan.plan
    if isinstance(plan, Plan):
        return _plan_object_waves(plan, pool_rank)
    data = _plan_json(plan)
    topology = data.get("topology") if isinstance(data.get("topology"), dict) else {}
    cp, dp = int(topology.get("cp", 1)), int(topology.get("dp", 1))
    waves = plan_waves(data)
    groups = [w.get("gpus") for w in waves if isinstance(w.get("gpus"), list)]
    pool = max(cp * dp, max((g for group in groups for g in group if isinstance(g, int)), default=-1) + 1)
    if isinstance(pool_rank, bool) or not isinstance(pool_rank, int) or not 0 <= pool_rank < pool:
        raise InputError(
            f"pool rank {pool_rank!r} is out of range: the pool has {pool} GPUs", field="pool_rank"
        )
    return rank_waves(waves, first=0, cp=cp, dp=dp, pool_rank=pool_rank)


def materialize_pool(plan: PlanLike, workload: Workload, *, pool_rank: int) -> list[RankBatch]:
    """The batches GPU ``pool_rank`` runs, wave by wave in schedule order (each one rank of its wave)."""
    return [materialize(plan, workload, wave=w, rank=r) for w, r in pool_waves(plan, pool_rank)]


def _plan_object_waves(plan: Plan, pool_rank: int) -> list[tuple[int, int]]:
    """A plan object's placements: its schedule, or (none) every wave on ranks ``0 .. cp - 1``."""
    if plan.schedule is not None:
        gpus, starts = [list(g) for g in plan.schedule.gpus], list(plan.schedule.start_s)
    else:
        gpus, starts = [list(range(w.cp)) for w in plan.waves], [float(i) for i in range(plan.num_waves)]
    pool = max((g for group in gpus for g in group), default=-1) + 1
    if isinstance(pool_rank, bool) or not isinstance(pool_rank, int) or not 0 <= pool_rank < max(pool, 1):
        raise InputError(
            f"pool rank {pool_rank!r} is out of range: the pool has {pool} GPUs", field="pool_rank"
        )
    return pool_rank_waves(gpus, starts, pool_rank)


def _plan_json(plan: dict[str, Any] | str | Path) -> dict[str, Any]:
    """The plan JSON dictionary of a path or a dictionary."""
    data = read_plan_file(plan) if isinstance(plan, str | Path) else plan
    if not isinstance(data, dict):
        raise InputError(f"expected a PlanResult or plan JSON, got {type(data).__name__}", field="plan")
    return data
