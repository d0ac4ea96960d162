"""A wave's ranks chained round its packed order: every rank takes over where the one before it stopped,
and the last hands over to the first.

A contiguous split runs the GDN recurrence in rounds that wait on each other: a rank whose range begins
inside a unit (a root subtree of the wave's prefix tree, :func:`~cpplan.pricing.whole_requests.segment_units`)
waits for the state of the rank before it, while the first rank, with no such wait, fills round 0 alone,
so its tokens and the waiting ranks' tokens add up (:func:`~cpplan.pricing.handoff.rounds_handoff`).
Rotating the split so that the first rank's range wraps round the end of the packed order gives every
rank both: the rest of a unit the rank before it cut (round 1) and whole units and the head of the unit it
cuts (round 0). When the units come in an order that lets every cut fall where a unit's rest is short,
about as much waits on every rank, and little waits at all. On eight GRPO groups of 8 rollouts arriving
shuffled (a prompt and its completions per unit), the quick suite's, it makes the wave 4.9% cheaper at
CP4 and 3.1% at CP8 than every split the proposers price (``benchmarks/bench_bound.py``).

:func:`chained_wave` tries the units in two orders (as packed, and largest and smallest alternating),
each at a few rotations of the split balanced barrier by barrier
(:func:`~cpplan.pricing.wave.barrier_balanced_ends`), and keeps the cheapest version that fits, where it
is cheaper than the wave: an exact price decides, as for every other version of a wave.
"""

from __future__ import annotations

import numpy as np

from cpplan.errors import InputError
from cpplan.pricing.evaluator import price
from cpplan.pricing.layout import PackedLayout, layout_share_mask
from cpplan.pricing.ownership import ChunkStats, chunk_stats, general_quantities, owner_of_ranges
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import (
    WavePlan,
    WaveVersions,
    barrier_balanced_ends,
    better_version,
    cannot_win,
)
from cpplan.pricing.whole_requests import segment_units, unit_quantities
from cpplan.spec.quantities import QUANTITY_INDEX

_TOKENS = QUANTITY_INDEX["tokens"]


def chained_wave(problem: Problem, wave: WavePlan, *, rotations: int) -> WavePlan | None:
    """The cheapest chained version of ``wave`` (see the module docstring) over both unit orders and
    ``rotations`` rotations each, where it fits and costs less than ``wave``; ``None`` otherwise, at one
    rank, for a split wave, a wave of one unit, or ``rotations`` 0."""
    if problem.topology.cp == 1 or wave.split or rotations == 0 or not wave.fits(problem.memory_bytes):
        return None
    mask = share_mask_of(problem, wave)
    items = np.asarray(wave.items, dtype=np.int64)
    item_unit, segment_unit = segment_units(
        wave.layout, (problem.item_ptr[items + 1] - problem.item_ptr[items]).tolist()
    )
    if item_unit.max() < 1:
        return None
    unit_tokens = unit_quantities(wave.layout, segment_unit)[:, _TOKENS]
    best = wave
    for units in unit_orders(unit_tokens):
        rank = np.empty_like(units)
        rank[units] = np.arange(units.size)
        order = np.lexsort((np.arange(items.size), rank[item_unit]))
        if (order == np.arange(items.size)).all():  # the wave's own packing
            layout, stats = wave.layout, wave.stats
        else:
            layout = problem.pack(items[order], mask)
            if not _same_segments(layout, wave.layout):
                continue  # the mask read back does not pack this order alike: not tried
            stats = chunk_stats(layout, problem.chunk_tokens)
        best = _cheapest_rotation(problem, wave, tuple(items[order].tolist()), stats, layout, rotations, best)
    return None if best is wave else best


def share_mask_of(problem: Problem, wave: WavePlan) -> np.ndarray:
    """The node mask ``wave``'s layout packs under: its layout spec's, or, for a layout known only by
    its segments (the joint model's, a baseline's), the mask read back from them
    (:func:`~cpplan.pricing.layout.layout_share_mask`)."""
    try:
        return problem.share_mask(wave.layout_name)
    except InputError:
        return layout_share_mask(problem.tree, wave.layout)


def unit_orders(unit_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The units as packed, and the largest and the smallest alternating (by tokens; ties in packed
    order): the cuts then fall in units of every size."""
    by_size = np.argsort(-np.asarray(unit_tokens), kind="stable")
    alternating = np.empty_like(by_size)
    alternating[0::2] = by_size[: (by_size.size + 1) // 2]
    alternating[1::2] = by_size[(by_size.size + 1) // 2 :][::-1]
    return np.arange(by_size.size), alternating


def rotated_owner(chunk_barrier_s: np.ndarray, start: int, num_ranks: int) -> np.ndarray:
    """Chunk owners of the split balanced barrier by barrier
    (:func:`~cpplan.pricing.wave.barrier_balanced_ends`) over the chunks taken from ``start`` round to
    ``start - 1``: rank 0's range begins at chunk ``start``, the last rank's wraps round the end."""
    num_chunks = chunk_barrier_s.shape[0]
    rotated = (np.arange(num_chunks) + start) % num_chunks
    owner = np.empty(num_chunks, dtype=np.int64)
    owner[rotated] = owner_of_ranges(barrier_balanced_ends(chunk_barrier_s[rotated], num_ranks))
    return owner


def rotation_starts(num_chunks: int, num_ranks: int, rotations: int) -> np.ndarray:
    """``rotations`` evenly spaced starts within one rank's share of the chunks (a start a whole share
    further gives the same ranges to other ranks), distinct."""
    share = max(1, num_chunks // num_ranks)
    return np.unique(np.linspace(0, share, rotations, endpoint=False).astype(np.int64))


def _cheapest_rotation(
    problem: Problem,
    wave: WavePlan,
    items: tuple[int, ...],
    stats: ChunkStats,
    layout: PackedLayout,
    rotations: int,
    best: WavePlan,
) -> WavePlan:
    """``best`` or the cheapest rotated split of ``items`` packed as ``layout`` (chunk statistics
    ``stats``) that beats it."""
    cp = problem.topology.cp
    versions = WaveVersions(
        problem=problem,
        items=items,
        layout=layout,
        layout_name=wave.layout_name,
        stats=stats,
        split=False,
        logical_tokens=wave.logical_tokens,
    )
    chunk_barrier_s = stats.quantity_matrix() @ problem.card.constants.barrier_coefficients.T
    for start in rotation_starts(stats.num_chunks, cp, rotations).tolist():
        owner = rotated_owner(chunk_barrier_s, start, cp)
        q = general_quantities(stats, owner, cp)
        prices = price(problem.card, q)
        if cannot_win(problem, best, prices):
            continue
        found = versions.wave(owner, q, prices)
        if better_version(found, best, problem.memory_bytes):
            best = found
    return best


def _same_segments(a: PackedLayout, b: PackedLayout) -> bool:
    """Whether two packings of one wave's requests hold the same segments' tokens (the same layout, in
    another order)."""
    return a.num_segments == b.num_segments and a.packed_tokens == b.packed_tokens
