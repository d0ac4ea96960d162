"""Pricing one candidate wave exactly: its packed layout, its CP ownership and every rank's peak."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from cpplan.pricing.evaluator import RankPrices, price, wave_cost_s
from cpplan.pricing.handoff import NO_HANDOFF, Handoff, wave_handoff
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import ChunkStats, chunk_stats, contiguous_split, rank_quantities
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import QUANTITY_INDEX


@dataclass(frozen=True, kw_only=True, eq=False)
class WavePlan:
    """One priced wave: items, layout, chunk ownership, per-rank quantities, prices and cost."""

    items: tuple[int, ...]
    layout_name: str
    layout: PackedLayout
    stats: ChunkStats
    owner: np.ndarray
    quantities: np.ndarray
    prices: RankPrices
    cost_s: float
    logical_tokens: int
    split: bool = False
    handoff: Handoff = NO_HANDOFF

    @property
    def packed_tokens(self) -> int:
        """Tokens in the wave's packed sequence."""
        return self.layout.packed_tokens

    @property
    def cp(self) -> int:
        """The wave's CP group size (its number of ranks)."""
        return int(self.quantities.shape[0])

    @property
    def peak_bytes(self) -> int:
        """The largest predicted peak over ranks."""
        return int(self.prices.peak_bytes.max())

    @property
    def busiest_rank(self) -> int:
        """The rank with the largest predicted peak."""
        return int(np.argmax(self.prices.peak_bytes))

    def fits(self, budget_bytes: int) -> bool:
        """Every rank's predicted peak is within the budget."""
        return bool((self.prices.peak_bytes <= budget_bytes).all())


def ownership_candidates(problem: Problem, stats: ChunkStats) -> list[np.ndarray]:
    """Contiguous ownerships to try: balanced by predicted seconds (attention work included) and by
    token count."""
    cp = problem.topology.cp
    if cp == 1:
        return [np.zeros(stats.num_chunks, dtype=np.int64)]
    time_weight = stats.quantity_matrix() @ problem.card.time_coefficients()
    by_time = contiguous_split(time_weight, cp)
    by_tokens = contiguous_split(stats.tokens.astype(np.float64), cp)
    return [by_time] if np.array_equal(by_time, by_tokens) else [by_time, by_tokens]


def price_wave(
    problem: Problem,
    items: Sequence[int],
    layout: PackedLayout,
    layout_name: str,
    owner: np.ndarray | None = None,
    *,
    split: bool = False,
) -> WavePlan:
    """Price ``layout`` for ``items``: with ``owner`` given, that chunk ownership; otherwise the best
    contiguous ownership (cheapest that fits, else the one with the lowest peak)."""
    stats = chunk_stats(layout, problem.chunk_tokens)
    owners = [owner] if owner is not None else ownership_candidates(problem, stats)
    best: WavePlan | None = None
    for candidate in owners:
        q = rank_quantities(stats, candidate, problem.topology.cp)
        prices = price(problem.card, q)
        handoff = wave_handoff(
            layout, candidate, stats.chunk_tokens, problem.topology.cp, problem.card.handoff
        )
        wave = WavePlan(
            items=tuple(items),
            layout_name=layout_name,
            layout=layout,
            stats=stats,
            owner=np.asarray(candidate, dtype=np.int64),
            quantities=q,
            prices=prices,
            cost_s=wave_cost_s(problem.card, prices) + handoff.seconds,
            logical_tokens=problem.logical_tokens(items),
            split=split,
            handoff=handoff,
        )
        if best is None or _better(wave, best, problem.budget_bytes):
            best = wave
    assert best is not None
    return best


def _better(a: WavePlan, b: WavePlan, budget: int) -> bool:
    fa, fb = a.fits(budget), b.fits(budget)
    if fa != fb:
        return fa
    if fa:
        return a.cost_s < b.cost_s
    return a.peak_bytes < b.peak_bytes


def best_wave(
    problem: Problem, items: Sequence[int], layouts: Sequence[str]
) -> tuple[WavePlan | None, WavePlan]:
    """The cheapest fitting wave over ``layouts`` (or ``None``), and the lowest-peak wave seen.

    Layouts whose masks take the same sharing decisions on these items pack identically; each such
    packing is priced once per problem (kept in ``problem.memo.priced_waves``; the first layout
    naming it wins ties).
    """
    items = tuple(items)
    counts = problem.tree.node_counts(problem.item_requests(items))
    cache = problem.memo.priced_waves
    seen: set[bytes] = set()
    fitting: WavePlan | None = None
    lowest: WavePlan | None = None
    for spec in layouts:
        take = (problem.share_mask(spec) & (counts >= 2)).tobytes()
        if take in seen:
            continue
        seen.add(take)
        wave = cache.get((items, take))
        if wave is None:
            wave = price_wave(problem, items, problem.pack(items, spec), spec)
            cache[(items, take)] = wave
        elif wave.layout_name != spec:
            wave = replace(wave, layout_name=spec)
        if wave.fits(problem.budget_bytes) and (fitting is None or wave.cost_s < fitting.cost_s):
            fitting = wave
        if lowest is None or wave.peak_bytes < lowest.peak_bytes:
            lowest = wave
    assert lowest is not None
    return fitting, lowest


def local_tokens(wave: WavePlan) -> np.ndarray:
    """Owned packed tokens per rank."""
    return wave.quantities[:, QUANTITY_INDEX["tokens"]].astype(np.int64)
