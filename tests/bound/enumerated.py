"""Every plan of a tiny problem, priced: the optimum a lower bound must not exceed."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from cpplan import Problem, Topology, Workload, load_model
from cpplan.pricing.ownership import chunk_stats
from cpplan.pricing.wave import WavePlan, price_wave, wave_counts
from cpplan.spec.settings import Settings


def tiny_problem(
    workload: Workload, *, cp: int, chunk_tokens: int, room: float, model: str = "qwen3-8b"
) -> Problem:
    """``workload`` on ``model`` (Qwen3-8B: no hand-off) with ``chunk_tokens``-token chunks, its budget
    ``room`` of the way from the static floor to the peak of every item in one full-sharing wave (so
    ``room < 1`` needs more than one wave or a thinner layout)."""
    roomy = Problem.build(
        workload, Settings(topology=Topology(cp=cp), model=load_model(model), memory_bytes=80 * 2**30)
    )
    roomy = dataclasses.replace(roomy, chunk_tokens=chunk_tokens)
    everything = list(range(roomy.num_items))
    peak = price_wave(roomy, everything, roomy.pack(everything, "full"), "full").peak_bytes
    static = roomy.card.constants.static_peak_bytes
    budget = peak if room >= 1 else int(static + room * (peak - static))
    settings = dataclasses.replace(roomy.settings, memory_bytes=budget)
    return dataclasses.replace(Problem.build(workload, settings), chunk_tokens=chunk_tokens)


def wave_layouts(problem: Problem, items: tuple[int, ...]):
    """Every layout of the wave of ``items``: one per subset of its sharing decisions."""
    counts = wave_counts(problem, items)
    shareable = np.flatnonzero(counts >= 2)
    requests = problem.item_requests(items)
    for chosen in itertools.product((False, True), repeat=shareable.size):
        mask = np.zeros(problem.tree.num_nodes, dtype=bool)
        mask[shareable[list(chosen)]] = True
        yield problem.pack_requests(requests, mask)


def wave_versions(problem: Problem, items: tuple[int, ...]):
    """Every version of the wave of ``items``: each of its layouts (:func:`wave_layouts`), each
    chunk-to-rank map as the ownership (the hand-off in its cheapest mode, as a wave is priced)."""
    for layout in wave_layouts(problem, items):
        num_chunks = chunk_stats(layout, problem.chunk_tokens).num_chunks
        for owner in itertools.product(range(problem.topology.cp), repeat=num_chunks):
            yield price_wave(problem, items, layout, "enumerated", owner=np.array(owner, dtype=np.int64))


def cheapest_version(problem: Problem, items: tuple[int, ...]) -> WavePlan | None:
    """The cheapest version of the wave of ``items`` that fits, or ``None``."""
    fitting = [w for w in wave_versions(problem, items) if w.fits(problem.memory_bytes)]
    return min(fitting, key=lambda w: w.cost_s, default=None)


def optimum(problem: Problem) -> tuple[float, list[WavePlan]] | None:
    """The cheapest plan of ``problem`` over every wave partition, layout, ownership and hand-off mode
    (dynamic programming over item subsets), or ``None`` when no plan fits."""
    n = problem.num_items
    best_wave: dict[int, WavePlan | None] = {}
    for mask in range(1, 1 << n):
        best_wave[mask] = cheapest_version(problem, tuple(i for i in range(n) if mask >> i & 1))
    best: dict[int, tuple[float, list[WavePlan]] | None] = {0: (0.0, [])}
    for mask in range(1, 1 << n):
        low = mask & -mask
        found = None
        sub = mask
        while sub:
            if sub & low and best_wave[sub] is not None and best[mask ^ sub] is not None:
                cost, waves = best[mask ^ sub]
                total = cost + best_wave[sub].cost_s
                if found is None or total < found[0]:
                    found = (total, [*waves, best_wave[sub]])
            sub = (sub - 1) & mask
        best[mask] = found
    return best[(1 << n) - 1]


__all__ = ["cheapest_version", "optimum", "tiny_problem", "wave_versions"]
