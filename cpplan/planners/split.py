"""The split path: an item too large for any wave is split along its prefix tree into consecutive waves.

The item's requests are ordered by their paths in the prefix tree (lexicographically by node), so the
requests below any tree node are adjacent and each piece keeps as much of its shared prefixes as it
can. Pieces are then grown like the greedy planner grows waves (double the width while the piece
fits, then binary-search), each priced exactly under the given layouts and marked ``split``. The item
is refused, naming the request, the rank, the bytes and the budget, only when one request alone does
not fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from cpplan.errors import NoFitError
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, price_wave
from cpplan.spec.units import format_bytes


def split_item(problem: Problem, item: int, layouts: Sequence[str]) -> list[WavePlan]:
    """Consecutive ``split`` waves that together hold every request of ``item`` exactly once."""
    order = tree_order(problem, problem.item_requests([item]))
    waves: list[WavePlan] = []
    start = 0
    while start < order.size:
        first, lowest = best_piece(problem, item, order[start : start + 1], layouts)
        if first is None:
            raise request_refusal(problem, item, int(order[start]), lowest)
        width, best = widest(
            lambda w, rest=order[start:]: best_piece(problem, item, rest[:w], layouts)[0],
            first,
            order.size - start,
        )
        waves.append(best)
        start += width
    return waves


def tree_order(problem: Problem, requests: np.ndarray) -> np.ndarray:
    """Tree request indices sorted by their root-to-leaf node paths (ties keep input order)."""
    return np.array(sorted(requests.tolist(), key=problem.tree.path), dtype=np.int64)


def best_piece(
    problem: Problem, item: int, requests: np.ndarray, layouts: Sequence[str]
) -> tuple[WavePlan | None, WavePlan]:
    """The cheapest fitting split wave holding ``requests`` of ``item`` (or ``None``) and the
    lowest-peak one seen."""
    fitting: WavePlan | None = None
    lowest: WavePlan | None = None
    logical = int(problem.request_tokens[requests].sum())
    for spec in layouts:
        layout = problem.pack_requests(requests, spec)
        wave = dataclasses.replace(
            price_wave(problem, (item,), layout, spec, split=True), logical_tokens=logical
        )
        if wave.fits(problem.budget_bytes) and (fitting is None or wave.cost_s < fitting.cost_s):
            fitting = wave
        if lowest is None or wave.peak_bytes < lowest.peak_bytes:
            lowest = wave
    assert lowest is not None
    return fitting, lowest


def widest(try_width: Callable[[int], WavePlan | None], first: WavePlan, limit: int) -> tuple[int, WavePlan]:
    """The largest width in ``[1, limit]`` found by doubling then binary search, and its wave.

    ``try_width(w)`` returns the wave of width ``w`` or ``None`` when it does not fit; width 1 fits
    with wave ``first``.
    """
    width, best, failed = 1, first, None
    while width < limit:
        trial = min(2 * width, limit)
        wave = try_width(trial)
        if wave is None:
            failed = trial
            break
        width, best = trial, wave
    if failed is not None:
        lo, hi = width, failed
        while hi - lo > 1:
            mid = (lo + hi) // 2
            wave = try_width(mid)
            if wave is None:
                hi = mid
            else:
                lo, best = mid, wave
        width = lo
    return width, best


def request_refusal(problem: Problem, item: int, request: int, lowest: WavePlan) -> NoFitError:
    """The error for a request that fits no wave even alone: item, request, rank, bytes and budget."""
    rank, needed, budget = lowest.busiest_rank, lowest.peak_bytes, problem.budget_bytes
    item_id = problem.workload.items[item].id
    k = int(problem.request_index[request])
    return NoFitError(
        f"item {item_id!r} does not fit in one wave and cannot be split to fit: its request {k} "
        f"({problem.tree.sequences[request].size:,} tokens) alone needs {needed:,} bytes "
        f"({format_bytes(needed)}) on rank {rank}, over the budget of {budget:,} bytes "
        f"({format_bytes(budget)})",
        item=item_id,
        request=k,
        rank=rank,
        needed_bytes=needed,
        budget_bytes=budget,
    )
