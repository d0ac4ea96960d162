"""From a solution to a priced :class:`~cpplan.result.Plan`: pack each wave, assign chunks, price.

Each used wave is packed with :meth:`Problem.pack` under the chosen share mask (cross nodes as the
solver shared them, local decision nodes as the item's chosen local layout). Its chunks go to ranks by
:func:`~cpplan.cpsat.ownership.capped_split`, with the largest per-rank cap the integer memory rows
still admit for the realized wave (never below the solver's cap), and the wave is priced exactly by
:func:`cpplan.wave.price_wave`; an uncapped balanced ownership replaces it when that fits and is
cheaper. The portfolio verifies the result like any other candidate.
"""

from __future__ import annotations

import numpy as np

from ..ownership import CHUNK_TOKENS, chunk_stats
from ..problem import Problem
from ..result import Plan
from ..wave import WavePlan, price_wave
from .memory import MemoryRows
from .ownership import capped_split
from .solve import Solution
from .space import LayoutSpace

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
    problem: Problem, space: LayoutSpace, rows: MemoryRows, solution: Solution, *, alternatives: bool = True
) -> Plan:
    """The solution as a plan of exactly priced waves.

    The capped split always respects the model's per-rank bounds. With ``alternatives`` the
    uncapped contiguous ownerships of :func:`cpplan.wave.price_wave` are priced too, and one of them
    replaces the capped split when it fits and is cheaper (the model prices a wave by its rank average,
    so the exact evaluator is the better judge of balance)."""
    cp = problem.topology.cp
    time_coef = problem.card.time_coefficients()
    waves: list[WavePlan] = []
    for w, (items, mask) in wave_masks(problem, space, solution).items():
        layout = problem.pack(items, mask)
        stats = chunk_stats(layout, problem.chunk_tokens)
        cap = max(solution.cap[w], widest_cap(rows, layout, stats.num_chunks, cp))
        cap = min(cap, stats.num_chunks)
        owner = capped_split(stats.quantity_matrix() @ time_coef, cp, cap)
        wave = price_wave(problem, items, layout, LAYOUT_NAME, owner=owner)
        if alternatives and cp > 1:
            other = price_wave(problem, items, layout, LAYOUT_NAME)
            if other.fits(problem.budget_bytes) and (
                not wave.fits(problem.budget_bytes) or other.cost_s < wave.cost_s
            ):
                wave = other
        waves.append(wave)
    return Plan(strategy="cpsat", waves=tuple(waves))


def widest_cap(rows: MemoryRows, layout, num_chunks: int, cp: int) -> int:
    """The largest chunks-per-rank cap the integer rows admit for a packed wave (every other local
    quantity bounded by the wave's total), or 0 when none does."""
    if cp == 1:
        return num_chunks
    grad = int(layout.seg_length[layout.seg_grad].sum())
    loss = int(layout.seg_length[layout.seg_loss].sum())
    pairs = layout.seg_length * layout.seg_position + layout.seg_length * (layout.seg_length + 1) // 2
    values = {
        "grad_tokens": grad,
        "loss_tokens": loss,
        "segments": layout.num_segments,
        "attn_pairs": int(pairs.sum()),
        "grad_attn_pairs": int(pairs[layout.seg_grad].sum()),
        "remote_tokens": layout.packed_tokens,
    }
    best = num_chunks
    for e in range(len(rows.static_kib)):
        rest = rows.rank_kib(e, 0, values)
        per_chunk = rows.per_chunk_kib[e]
        if per_chunk > 0:
            best = min(best, (rows.budget_kib - rest) // per_chunk)
        elif rest > rows.budget_kib:
            return 0
    assert CHUNK_TOKENS > 0
    return max(best, 0)
