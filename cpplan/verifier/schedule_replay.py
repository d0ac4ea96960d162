"""The verifier's replay of a plan's schedule (its own code: nothing shared with
:mod:`cpplan.plans.pool_schedule`).

Every wave names its CP group size ``cp`` and its pool ranks ``gpus``: an aligned block of ``cp``
ranks of the pool of ``dp * cp`` GPUs (under fixed CP the group size is the topology's). Replaying the
waves in plan order, each starts when all of its GPUs are free; the claimed ``start_s`` must be that
start, and the plan's cost is the last finish (the makespan) when the pool holds several groups, the
sum of the waves' costs otherwise. A wave without ``gpus`` (a plan written before schedules) is dealt
round-robin to the replicas.
"""

from __future__ import annotations

import math
from typing import Any

from cpplan.spec.topology import Topology
from cpplan.verifier.rank_prices import close


def wave_group(w: int, wave: dict[str, Any], topology: Topology, violations: list[str]) -> int | None:
    """The wave's CP group size: its ``cp`` (the topology's when absent), which must be a group size
    the topology allows; ``None`` (after a violation) when it is not."""
    size = wave.get("cp", topology.cp)
    if isinstance(size, bool) or not isinstance(size, int) or size not in topology.group_sizes():
        allowed = ", ".join(str(g) for g in topology.group_sizes())
        violations.append(f"wave {w}: cp {size!r} is not a group size of topology {topology} ({allowed})")
        return None
    return size


def wave_gpus(
    w: int, wave: dict[str, Any], size: int, topology: Topology, violations: list[str]
) -> list[int]:
    """The wave's pool ranks: its ``gpus``, which must be an aligned block of ``size`` ranks of the pool
    (round-robin over the replicas when absent)."""
    gpus = wave.get("gpus")
    if gpus is None:
        first = (w % topology.dp) * topology.cp
        return list(range(first, first + size))
    ok = isinstance(gpus, list) and len(gpus) == size and all(isinstance(g, int) for g in gpus)
    if (
        ok
        and gpus[0] % size == 0
        and gpus == list(range(gpus[0], gpus[0] + size))
        and gpus[-1] < topology.pool
    ):
        return gpus
    violations.append(
        f"wave {w}: gpus {gpus!r} is not an aligned block of {size} ranks of the pool of {topology.pool}"
    )
    return list(range(size))


def replay_cost(
    waves: list[dict[str, Any]],
    groups: list[list[int]],
    costs: list[float],
    topology: Topology,
    violations: list[str],
    *,
    indices: list[int],
) -> float:
    """Replay the waves in order on the pool, check each claimed ``start_s``, and return the plan's
    cost: the makespan under ``dp > 1`` or dynamic CP, the sum of the waves' costs otherwise.
    ``indices``: each wave's index in the plan, which the messages name."""
    free = [0.0] * topology.pool
    for w, wave, group, cost in zip(indices, waves, groups, costs, strict=True):
        start = max(free[g] for g in group)
        claimed = wave.get("start_s")
        if isinstance(claimed, int | float) and not isinstance(claimed, bool) and not close(claimed, start):
            violations.append(f"wave {w}: start_s {claimed} but the replay starts it at {start}")
        for g in group:
            free[g] = start + cost
    if topology.dynamic_cp or topology.dp > 1:
        return max(free, default=0.0)
    return math.fsum(costs)
