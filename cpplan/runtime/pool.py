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
from cpplan.pricing.plan_reader import plan_waves, read_plan_file
from cpplan.pricing.result import Plan, PlanResult
from cpplan.pricing.schedule import pool_rank_waves
from cpplan.runtime.materialize import RankBatch, materialize
from cpplan.spec.workload import Workload

PlanLike = Plan | PlanResult | dict[str, Any] | str | Path


def pool_waves(plan: PlanLike, pool_rank: int) -> list[tuple[int, int]]:
    """The ``(wave, wave rank)`` pairs that GPU ``pool_rank`` of the pool runs, in schedule order."""
    gpus, starts = _placements(plan)
    pool = max(_pool_size(plan), max((g for group in gpus for g in group), default=-1) + 1)
    if isinstance(pool_rank, bool) or not isinstance(pool_rank, int) or not 0 <= pool_rank < pool:
        raise InputError(
            f"pool rank {pool_rank!r} is out of range: the pool has {pool} GPUs", field="pool_rank"
        )
    return pool_rank_waves(gpus, starts, pool_rank)


def materialize_pool(plan: PlanLike, workload: Workload, *, pool_rank: int) -> list[RankBatch]:
    """The batches GPU ``pool_rank`` runs, wave by wave in schedule order (each one rank of its wave)."""
    return [materialize(plan, workload, wave=w, rank=r) for w, r in pool_waves(plan, pool_rank)]


def _placements(plan: PlanLike) -> tuple[list[list[int]], list[float]]:
    """Every wave's pool ranks and start."""
    if isinstance(plan, PlanResult):
        plan = plan.plan
    if isinstance(plan, Plan):
        if plan.schedule is not None:
            return [list(g) for g in plan.schedule.gpus], list(plan.schedule.start_s)
        return [list(range(w.cp)) for w in plan.waves], [float(i) for i in range(plan.num_waves)]
    data = read_plan_file(plan) if isinstance(plan, str | Path) else plan
    if not isinstance(data, dict):
        raise InputError(f"expected a Plan, PlanResult or plan JSON, got {type(data).__name__}", field="plan")
    return _json_placements(data)


def _json_placements(data: dict[str, Any]) -> tuple[list[list[int]], list[float]]:
    """Pool ranks and starts from plan JSON (round-robin over the replicas where a wave has none)."""
    topology = data.get("topology") if isinstance(data.get("topology"), dict) else {}
    cp, dp = int(topology.get("cp", 1)), int(topology.get("dp", 1))
    gpus, starts = [], []
    for w, wave in enumerate(plan_waves(data)):
        group = wave.get("gpus")
        if group is None:
            group = list(range((w % dp) * cp, (w % dp) * cp + int(wave.get("cp", cp))))
        if not isinstance(group, list) or not all(isinstance(g, int) and g >= 0 for g in group):
            raise InputError("must be a list of pool ranks", field=f"waves[{w}].gpus")
        start = wave.get("start_s", float(w))
        gpus.append(group)
        starts.append(float(start) if isinstance(start, int | float) else float(w))
    return gpus, starts


def _pool_size(plan: PlanLike) -> int:
    """The pool's GPUs as the plan states them (``dp * cp`` of its topology), 0 where unknown."""
    if isinstance(plan, PlanResult):
        return plan.problem.topology.pool
    if isinstance(plan, dict) and isinstance(plan.get("topology"), dict):
        topology = plan["topology"]
        return int(topology.get("dp", 1)) * int(topology.get("cp", 1))
    return 0
