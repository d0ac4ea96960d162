"""From a joint-model solution to a priced :class:`~cpplan.plans.plan.Plan`: each used wave packed with
the chosen share mask and priced by :func:`~cpplan.pricing.wave.price_wave` under the proposers'
balanced split, or, where that split breaks a rank's memory, within the model's per-rank bounds
(:func:`capped_owner`); a wave that took an exact column is the column's own priced wave, unchanged.
"""

from __future__ import annotations

import numpy as np

from cpplan.cpsat.columns import Column
from cpplan.cpsat.solve import Solution
from cpplan.cpsat.space import LayoutSpace
from cpplan.plans.plan import Plan
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import chunk_stats, contiguous_split
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, price_wave

LAYOUT_NAME = "cpsat"


def wave_masks(
    problem: Problem, space: LayoutSpace, solution: Solution
) -> dict[int, tuple[list[int], np.ndarray]]:
    """Per used wave: its items (ascending) and the tree-wide share mask."""
    waves: dict[int, tuple[list[int], np.ndarray]] = {}
    for i, (w, j) in enumerate(solution.assignment):
        if w not in waves:
            mask = np.zeros(problem.tree.num_nodes, dtype=bool)
            for k, node in enumerate(space.cross):
                mask[node.node] = (k, w) in solution.shared
            waves[w] = ([], mask)
        items, mask = waves[w]
        items.append(i)
        item = space.items[i]
        mask[list(item.decision_nodes)] = item.layouts[j].shared
    return dict(sorted(waves.items()))


def realize(
    problem: Problem,
    space: LayoutSpace,
    solution: Solution,
    *,
    columns: tuple[Column, ...] = (),
) -> Plan:
    """The solution as a plan of exactly priced waves; a wave that took an exact column is that
    column's priced wave, unchanged (``columns`` are the compiled model's)."""
    waves: list[WavePlan] = []
    for w, (items, mask) in wave_masks(problem, space, solution).items():
        g = solution.column(w)
        if g is not None:
            assert columns[g].items == tuple(items), (w, g)
            waves.append(columns[g].wave)
            continue
        layout = problem.pack(items, mask)
        wave = price_wave(problem, items, layout, LAYOUT_NAME)
        if not wave.fits(problem.memory_bytes):
            wave = price_wave(
                problem,
                items,
                layout,
                LAYOUT_NAME,
                owner=capped_owner(problem, solution, w, layout),
            )
        waves.append(wave)
    return Plan(strategy="cpsat", waves=tuple(waves))


def capped_owner(problem: Problem, solution: Solution, w: int, layout: PackedLayout) -> np.ndarray:
    """Chunk owners of wave ``w`` within the model's per-rank bounds: contiguous ranges balancing
    predicted seconds, each of at most the solver's chunk cap of the wave, so the memory rows it solved
    hold for the packed wave."""
    cp = problem.topology.cp
    stats = chunk_stats(layout, problem.chunk_tokens)
    time_weights = stats.quantity_matrix() @ problem.card.time_coefficients()
    cap = min(solution.cap[w], stats.num_chunks)
    assert cp * cap >= stats.num_chunks, (cp, cap, stats.num_chunks)
    return contiguous_split(time_weights, cp, max_chunks=cap)
