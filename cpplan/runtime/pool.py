"""Each pool rank's work: which waves a GPU of the ``dp * cp`` pool runs, as which wave rank, in order.

A plan's waves carry their pool ranks (``gpus``: rank ``r`` of the wave runs on ``gpus[r]``) and their
starts (``start_s``); a GPU runs the waves whose groups hold it, in order of their starts (plan order
among equal starts). Plans without a schedule (one CP group, ``dp = 1``) run every wave on ranks
``0 .. cp - 1``; plan JSON written before schedules deals waves round-robin to the replicas.

Under equal waves (the plan's topology says ``equal_waves``: on by default whenever the pool holds more
than one CP group) every pool rank's list has the same length: a GPU with fewer real waves gets
``None`` entries at its end, one per padding wave. A trainer runs each ``None`` as an empty forward
and backward (zero tokens, so zero loss and zero gradient contribution) so that FSDP's or ZeRO-3's
per-forward parameter all-gathers and the gradient reduce-scatters match on every GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpplan.errors import InputError
from cpplan.plans.plan import Plan
from cpplan.plans.plan_reader import padding_waves, plan_waves, rank_waves, read_plan_file
from cpplan.plans.pool_schedule import pool_rank_waves
from cpplan.plans.result import PlanResult
from cpplan.runtime.materialize import RankBatch, materialize
from cpplan.spec.workload import Workload

PlanLike = Plan | PlanResult | dict[str, Any] | str | Path


def pool_waves(plan: PlanLike, pool_rank: int) -> list[tuple[int, int] | None]:
    """The ``(wave, wave rank)`` pairs that GPU ``pool_rank`` of the pool runs, in schedule order, then
    (under equal waves) ``None`` for each of its empty padding waves: every pool rank's list has the
    same length."""
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
    padding = padding_waves(data)
    extra = padding[pool_rank] if pool_rank < len(padding) else 0
    return [*rank_waves(waves, first=0, cp=cp, dp=dp, pool_rank=pool_rank), *[None] * extra]


def materialize_pool(plan: PlanLike, workload: Workload, *, pool_rank: int) -> list[RankBatch | None]:
    """The batches GPU ``pool_rank`` runs, wave by wave in schedule order (each one rank of its wave),
    and ``None`` for each padding wave (run it as an empty forward: :func:`pool_waves`)."""
    return [
        None if entry is None else materialize(plan, workload, wave=entry[0], rank=entry[1])
        for entry in pool_waves(plan, pool_rank)
    ]


def _plan_object_waves(plan: Plan, pool_rank: int) -> list[tuple[int, int] | None]:
    """A plan object's placements: its schedule (and its padding), or (none) every wave on ranks
    ``0 .. cp - 1``."""
    if plan.schedule is not None:
        gpus, starts = [list(g) for g in plan.schedule.gpus], list(plan.schedule.start_s)
    else:
        gpus, starts = [list(range(w.cp)) for w in plan.waves], [float(i) for i in range(plan.num_waves)]
    pool = max((g for group in gpus for g in group), default=-1) + 1
    if isinstance(pool_rank, bool) or not isinstance(pool_rank, int) or not 0 <= pool_rank < max(pool, 1):
        raise InputError(
            f"pool rank {pool_rank!r} is out of range: the pool has {pool} GPUs", field="pool_rank"
        )
    padding = plan.schedule.padding if plan.schedule is not None else None
    extra = padding[pool_rank] if padding is not None and pool_rank < len(padding) else 0
    return [*pool_rank_waves(gpus, starts, pool_rank), *[None] * extra]


def _plan_json(plan: dict[str, Any] | str | Path) -> dict[str, Any]:
    """The plan JSON dictionary of a path or a dictionary."""
    data = read_plan_file(plan) if isinstance(plan, str | Path) else plan
    if not isinstance(data, dict):
        raise InputError(f"expected a PlanResult or plan JSON, got {type(data).__name__}", field="plan")
    return data
