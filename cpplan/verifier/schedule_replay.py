"""The verifier's replay of a plan's schedule (its own code: nothing shared with
:mod:`cpplan.plans.pool_schedule`).

Every wave names its CP group size ``cp`` and its pool ranks ``gpus``: an aligned block of ``cp``
ranks of the pool of ``dp * cp`` GPUs (under fixed CP the group size is the topology's). Replaying the
waves in plan order, each starts when all of its GPUs are free; the claimed ``start_s`` must be that
start, and the plan's cost is the last finish (the makespan) when the pool holds several groups, the
sum of the waves' costs otherwise. A wave without ``gpus`` (a plan written before schedules) is dealt
round-robin to the replicas.

Equal waves: a plan with a ``padding`` object claims that every pool rank runs the same number of
waves, its real waves plus ``padding.waves[g]`` empty ones after them, each costing the card's fixed
per-wave cost; the verifier counts each rank's waves itself, refuses unequal totals (and a topology
that requires equal waves from a plan whose ranks' counts differ without padding), and prices the
padding into the makespan.
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
    padding: tuple[Any, float] = (None, 0.0),
    *,
    indices: list[int],
) -> float:
    """Replay the waves in order on the pool, check each claimed ``start_s``, and return the plan's
    cost: the makespan under ``dp > 1`` or dynamic CP (with each rank's padding waves when the plan
    claims equal waves: ``padding`` is the plan's ``padding`` object and the card's per-wave cost), the
    sum of the waves' costs otherwise. ``indices``: each wave's index in the plan, which the messages
    name."""
    free = [0.0] * topology.pool
    counts = [0] * topology.pool
    for w, wave, group, cost in zip(indices, waves, groups, costs, strict=True):
        start = max(free[g] for g in group)
        claimed = wave.get("start_s")
        if isinstance(claimed, int | float) and not isinstance(claimed, bool) and not close(claimed, start):
            violations.append(f"wave {w}: start_s {claimed} but the replay starts it at {start}")
        for g in group:
            free[g] = start + cost
            counts[g] += 1
    empty = equal_wave_padding(padding[0], counts, padding[1], topology, violations)
    if empty is not None:
        return max(f + n * padding[1] for f, n in zip(free, empty, strict=True))
    if topology.dynamic_cp or topology.dp > 1:
        return max(free, default=0.0)
    return math.fsum(costs)


def equal_wave_padding(
    claim: Any, counts: list[int], wave_cost_s: float, topology: Topology, violations: list[str]
) -> list[int] | None:
    """Each pool rank's padding waves as the plan claims them (``None``: the plan claims no equal
    waves), after checking that every rank then runs the same number of waves and that one padding
    wave is priced at the card's per-wave cost; a topology that requires equal waves refuses a plan
    without padding whose ranks' counts differ."""
    if claim is None:
        if topology.needs_equal_waves and len(set(counts)) > 1:
            violations.append(
                f"topology {topology} requires equal waves per GPU, but pool ranks run {_spread(counts)} "
                "waves and the plan has no padding"
            )
        return None
    empty = claim.get("waves") if isinstance(claim, dict) else None
    if not isinstance(empty, list) or len(empty) != len(counts) or not all(_count(n) for n in empty):
        violations.append(f"padding.waves {empty!r} is not one count of empty waves per pool rank")
        return [0] * len(counts)
    totals = [n + e for n, e in zip(counts, empty, strict=True)]
    if len(set(totals)) > 1:
        violations.append(
            f"the plan claims equal waves per GPU, but with padding pool ranks run {_spread(totals)} waves "
            f"(real waves {counts}, padding {empty})"
        )
    priced = claim.get("wave_cost_s")
    if not isinstance(priced, int | float) or isinstance(priced, bool) or not close(priced, wave_cost_s):
        violations.append(f"padding.wave_cost_s {priced!r} is not the card's per-wave cost {wave_cost_s}")
    return empty


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _spread(counts: list[int]) -> str:
    """``3 to 5`` (the fewest and most of ``counts``)."""
    return f"{min(counts)} to {max(counts)}"
