"""Where and when waves run on the pool of ``dp * cp`` GPUs: placement, replay and the makespan.

A wave of CP group size ``g`` runs on an aligned block of ``g`` pool ranks (block ``b`` is ranks
``b*g .. b*g + g - 1``; rank ``r`` of the wave runs on ``gpus[r]``). The schedule's semantics are a
replay in plan order: each wave starts when every GPU of its group is free (the finish of the last
earlier wave on any of them), and the step ends when the last GPU finishes: its *makespan*, the plan's
``cost_s`` whenever the pool holds more than one group (``dp > 1`` or dynamic CP).

:func:`place` assigns waves to blocks for balance (longest first, each on the block where it can start
earliest) instead of round-robin; a run of split waves of one item is placed as one unit, back to back
on one block, so its waves stay consecutive in plan order.

Equal waves (``Topology.needs_equal_waves``: FSDP and ZeRO-3 all-gather every layer's parameters over
the whole pool at every forward, so every GPU must run as many forwards as every other): a GPU that
holds fewer waves than the busiest runs empty *padding* waves after its last one, each costing
``padding_s`` (the card's fixed per-wave cost, :attr:`ResolvedCard.wave_overhead_s`), and the makespan
is the last GPU's finish with its padding. With ``padding_s`` ``None`` nothing is padded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Each wave's group (``gpus``: its pool ranks, in wave-rank order) and start (``start_s``, per the
    cost model), in plan order, and the ``makespan_s`` of the replay."""

    pool: int
    gpus: tuple[tuple[int, ...], ...]
    start_s: tuple[float, ...]
    makespan_s: float
    padding: tuple[int, ...] | None = None
    """Under equal waves, the empty waves each pool rank runs after its last wave so every rank runs as
    many as the busiest; ``None``: waves are not equalized."""
    padding_s: float = 0.0
    """The seconds of one padding wave (counted in :attr:`makespan_s`)."""

    def __post_init__(self) -> None:
        assert len(self.gpus) == len(self.start_s), "one group and one start per wave"
        assert self.padding is None or len(self.padding) == self.pool, "one padding count per pool rank"


def block(size: int, index: int) -> tuple[int, ...]:
    """The pool ranks of aligned block ``index`` of ``size`` ranks."""
    return tuple(range(index * size, (index + 1) * size))


def replay(costs: Sequence[float], gpus: Sequence[Sequence[int]], pool: int) -> tuple[list[float], float]:
    """Each wave's start when waves run in order, each as soon as every GPU of its group is free, and
    the makespan (0 for no waves)."""
    free = [0.0] * pool
    starts = []
    for cost, group in zip(costs, gpus, strict=True):
        start = max(free[g] for g in group)
        for g in group:
            free[g] = start + cost
        starts.append(start)
    return starts, max(free, default=0.0)


def wave_counts(gpus: Sequence[Sequence[int]], pool: int) -> list[int]:
    """How many waves each pool rank runs."""
    counts = [0] * pool
    for group in gpus:
        for g in group:
            counts[g] += 1
    return counts


def timed(
    costs: Sequence[float], gpus: Sequence[Sequence[int]], pool: int, padding_s: float | None = None
) -> Schedule:
    """The schedule of waves run in order on ``gpus`` (:func:`replay`); with ``padding_s``, every pool
    rank padded with empty waves of ``padding_s`` seconds to the busiest rank's count, the makespan
    counting them."""
    starts, makespan = replay(costs, gpus, pool)
    padding = None
    if padding_s is not None:
        counts = wave_counts(gpus, pool)
        padding = tuple(max(counts, default=0) - n for n in counts)
        free = [0.0] * pool
        for cost, start, group in zip(costs, starts, gpus, strict=True):
            for g in group:
                free[g] = start + cost
        makespan = max((f + n * padding_s for f, n in zip(free, padding, strict=True)), default=0.0)
    return Schedule(
        pool=pool,
        gpus=tuple(tuple(g) for g in gpus),
        start_s=tuple(starts),
        makespan_s=makespan,
        padding=padding,
        padding_s=0.0 if padding_s is None else float(padding_s),
    )


def sequential(costs: Sequence[float], size: int, padding_s: float | None = None) -> Schedule:
    """Every wave on ranks ``0 .. size - 1``, one after another (a single CP group: ``dp = 1``; under
    equal waves nothing needs padding)."""
    return timed(costs, [block(size, 0)] * len(costs), size, padding_s)


def units(split_items: Sequence[int | None]) -> list[list[int]]:
    """Wave indices grouped into placement units: a run of consecutive split waves of one item (their
    ``split_items`` entry is the item) is one unit, every other wave its own."""
    found: list[list[int]] = []
    for w, item in enumerate(split_items):
        if found and item is not None and split_items[found[-1][-1]] == item:
            found[-1].append(w)
        else:
            found.append([w])
    return found


def place(
    costs: Sequence[float],
    sizes: Sequence[int],
    pool: int,
    split_items: Sequence[int | None],
    padding_s: float | None = None,
) -> tuple[list[int], Schedule]:
    """Balance waves over the pool's aligned blocks: units by decreasing group size, then decreasing
    seconds (ties in plan order), each on the block where it can start earliest (ties to the lowest
    block); under equal waves (``padding_s``), on the block that leaves the least padded makespan so far
    (ties to the earliest start, then the lowest block). Returns the new plan order (old wave indices)
    and its schedule, whose replay reproduces the placement exactly."""
    groups = units(split_items)
    duration = [math.fsum(costs[w] for w in unit) for unit in groups]
    ranked = sorted(range(len(groups)), key=lambda u: (-sizes[groups[u][0]], -duration[u], u))
    free = [0.0] * pool
    counts = [0] * pool
    order: list[int] = []
    gpus: list[tuple[int, ...]] = []
    for u in ranked:
        size = sizes[groups[u][0]]
        choices = [block(size, b) for b in range(pool // size)]
        if padding_s is None:
            chosen = min(choices, key=lambda ranks: max(free[g] for g in ranks))
        else:
            unit = (duration[u], len(groups[u]))
            chosen = min(choices, key=lambda ranks: _padded_after(free, counts, ranks, unit, padding_s))
        for w in groups[u]:
            start = max(free[g] for g in chosen)
            for g in chosen:
                free[g] = start + costs[w]
                counts[g] += 1
            order.append(w)
            gpus.append(chosen)
    return order, timed([costs[w] for w in order], gpus, pool, padding_s)


def _padded_after(
    free: Sequence[float],
    counts: Sequence[int],
    ranks: Sequence[int],
    unit: tuple[float, int],
    padding_s: float,
) -> tuple[float, float]:
    """The padded makespan of the placement so far with one more unit (its seconds and waves) on
    ``ranks``, and that unit's start."""
    seconds, num_waves = unit
    start = max(free[g] for g in ranks)
    inside = set(ranks)
    after = [(start + seconds, n + num_waves) if g in inside else (free[g], n) for g, n in enumerate(counts)]
    most = max(n for _, n in after)
    return max(f + (most - n) * padding_s for f, n in after), start


def pool_rank_waves(
    gpus: Sequence[Sequence[int]], start_s: Sequence[float], pool_rank: int
) -> list[tuple[int, int]]:
    """The ``(wave, wave rank)`` pairs pool rank ``pool_rank`` runs, in schedule order (by start, then
    plan order)."""
    mine = [
        (start_s[w], w, list(group).index(pool_rank)) for w, group in enumerate(gpus) if pool_rank in group
    ]
    return [(w, rank) for _, w, rank in sorted(mine)]


def dp_rank_of(wave_index: int, dp: int) -> int:
    """The replica of a wave of a plan without a schedule: dealt round-robin (plans priced under
    ``dp > 1`` carry a :class:`Schedule` whose ``gpus`` say where each wave runs instead)."""
    return wave_index % dp
