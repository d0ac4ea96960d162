"""The split path's pieces: an item too large for any wave is split along its prefix tree into consecutive
waves (:func:`cpplan.planners.greedy.split_item` plans them). Its requests, ordered by their tree paths so
that those below a node stay adjacent, become the items of a problem of their own (:func:`request_problem`),
planned as greedy plans waves and marked ``split`` (:func:`as_piece`); the item is refused only when one
request alone does not fit (:func:`request_refusal`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from cpplan.errors import NoFitError
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, cheapest_and_lowest, price_wave
from cpplan.spec.units import format_bytes
from cpplan.spec.workload import Item, Workload


def request_problem(problem: Problem, item: int, order: np.ndarray) -> Problem:
    """The requests ``order`` (tree request indices of ``item``) as a problem of one-request items, in
    that order, under the same settings."""
    requests = problem.workload.items[item].requests
    base = int(problem.item_ptr[item])
    name = problem.workload.items[item].id
    pieces = tuple(Item(id=f"{name}/{r - base}", requests=(requests[r - base],)) for r in order.tolist())
    return Problem.build(
        Workload(items=pieces, source=problem.workload.source, token_ids=problem.workload.token_ids),
        problem.settings,
        reorder_waves=problem.reorder_waves,
    )


def as_piece(wave: WavePlan, item: int, order: np.ndarray) -> WavePlan:
    """A wave of the requests' problem as the ``split`` wave of ``item``: its requests (there, request
    ``j`` is ``order[j]``) mapped back; the same packing and prices."""
    layout = dataclasses.replace(
        wave.layout, request_ids=order[wave.layout.request_ids], seg_src=order[wave.layout.seg_src]
    )
    return dataclasses.replace(wave, items=(item,), layout=layout, split=True)


def tree_order(problem: Problem, requests: np.ndarray) -> np.ndarray:
    """Tree request indices sorted by their root-to-leaf node paths (ties keep input order)."""
    return np.array(sorted(requests.tolist(), key=problem.tree.path), dtype=np.int64)


def best_piece(
    problem: Problem, item: int, requests: np.ndarray, layouts: Sequence[str]
) -> tuple[WavePlan | None, WavePlan]:
    """The cheapest fitting split wave holding ``requests`` of ``item`` (or ``None``) and the
    lowest-peak one seen."""
    logical = int(problem.request_tokens[requests].sum())
    waves = (
        dataclasses.replace(
            price_wave(problem, (item,), problem.pack_requests(requests, spec), spec, split=True),
            logical_tokens=logical,
        )
        for spec in layouts
    )
    return cheapest_and_lowest(waves, problem.memory_bytes)


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
    rank, needed, memory_bytes = lowest.busiest_rank, lowest.peak_bytes, problem.memory_bytes
    item_id = problem.workload.items[item].id
    k = int(problem.request_index[request])
    return NoFitError(
        f"item {item_id!r} does not fit in one wave and cannot be split to fit: its request {k} "
        f"({problem.tree.sequences[request].size:,} tokens) alone needs {needed:,} bytes "
        f"({format_bytes(needed)}) on rank {rank}, over the budget of {memory_bytes:,} bytes "
        f"({format_bytes(memory_bytes)})",
        item=item_id,
        request=k,
        rank=rank,
        needed_bytes=needed,
        memory_bytes=memory_bytes,
    )
