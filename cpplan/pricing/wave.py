"""Pricing one candidate wave exactly: its packed layout, its CP ownership and every rank's peak."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from cpplan.pricing.evaluator import RankPrices, price, wave_cost_s
from cpplan.pricing.handoff import NO_HANDOFF, Handoff
from cpplan.pricing.handoff_mode import ROUNDS, chosen_handoff
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import ChunkStats, chunk_stats, contiguous_split, rank_quantities
from cpplan.pricing.problem import Problem
from cpplan.spec.quantities import COUNTS, NUM_QUANTITIES, QUANTITIES, QUANTITY_INDEX, check_rules


@dataclass(frozen=True, kw_only=True, eq=False)
class WavePlan:
    """One priced wave: items, layout, chunk ownership, per-rank quantities, prices and cost.
    ``handoff``: its GDN hand-off in the chosen mode, whose seconds ``cost_s`` counts; ``gdn_handoff``:
    that mode, how its GDN states cross ranks (:mod:`cpplan.pricing.handoff_mode`)."""

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
    gdn_handoff: str = ROUNDS

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

    def fits(self, memory_bytes: int) -> bool:
        """Every rank's predicted peak is within the budget."""
        return bool((self.prices.peak_bytes <= memory_bytes).all())


def ownership_candidates(problem: Problem, stats: ChunkStats) -> list[np.ndarray]:
    """Contiguous ownerships to try: balanced by predicted seconds (attention work included), by token
    count and, where the card has more than one barrier (:mod:`cpplan.pricing.evaluator`), by mixes of
    the two costliest barriers' seconds, each normalized to its wave total (the best of
    :data:`BARRIER_MIXES` by its barrier seconds): a wave costs the slowest rank
    of each barrier, so the split balancing the total is rarely the cheapest (a long sequence's early
    ranks hold more tokens, its late ranks more attended pairs)."""
    cp = problem.topology.cp
    if cp == 1:
        return [np.zeros(stats.num_chunks, dtype=np.int64)]
    matrix = stats.quantity_matrix()
    time_weight = matrix @ problem.card.constants.time_coefficients
    candidates = [contiguous_split(time_weight, cp), contiguous_split(stats.tokens.astype(np.float64), cp)]
    per_barrier = matrix @ problem.card.constants.barrier_coefficients.T
    totals = per_barrier.sum(axis=0)
    largest = np.argsort(-totals, kind="stable")[:2]
    if largest.size == 2 and totals[largest[1]] > 0:
        normalized = per_barrier[:, largest] / totals[largest]
        mixes = [contiguous_split(normalized @ mix, cp) for mix in BARRIER_MIXES]
        candidates.append(min(mixes, key=lambda owner: _barrier_seconds(problem, stats, owner)))
    distinct: list[np.ndarray] = []
    for owner in candidates:
        if not any(np.array_equal(owner, seen) for seen in distinct):
            distinct.append(owner)
    return distinct


BARRIER_MIXES = tuple(np.array([k / 4, 1 - k / 4]) for k in range(5))
"""Weights of the two costliest barriers' normalized seconds that :func:`ownership_candidates` balances:
each alone and three mixes between; the one whose ranks' barrier seconds sum lowest is priced exactly
(with the total- and token-balanced splits), so a wave costs three pricings, not seven."""


def _barrier_seconds(problem: Problem, stats: ChunkStats, owner: np.ndarray) -> float:
    """The per-barrier slowest-rank seconds of a chunk ownership (no memory, no hand-off): a screen."""
    quantities = rank_quantities(stats, owner, problem.topology.cp)
    return float((quantities @ problem.card.constants.barrier_coefficients.T).max(axis=0).sum())


EDGE_STEPS = 12
"""Repair steps :func:`edge_ownership` takes before it gives up."""


def edge_ownership(problem: Problem, stats: ChunkStats, owner: np.ndarray) -> np.ndarray | None:
    """For a wave at the memory edge: ``owner`` (contiguous, balanced by time) repaired until every
    rank fits, or ``None``. The rank furthest over the budget hands chunks at one end to the neighbour
    with the lower peak, as many as its excess over its bytes per chunk, every step priced exactly;
    the ranks' times stay as close to balanced as the memory allows (the token-balanced split, the
    other fallback, lets them drift further)."""
    cp, memory_bytes = problem.topology.cp, problem.memory_bytes
    sizes = np.bincount(owner, minlength=cp)
    static = problem.card.constants.static_peak_bytes
    for _ in range(EDGE_STEPS):
        peaks = price(problem.card, rank_quantities(stats, owner, cp)).peak_bytes
        worst = int(np.argmax(peaks))
        if peaks[worst] <= memory_bytes:
            return owner
        per_chunk = max(peaks[worst] - static, 1.0) / sizes[worst]
        moved = min(int(np.ceil((peaks[worst] - memory_bytes) / per_chunk)), int(sizes[worst]) - 1)
        if moved < 1:
            return None
        neighbours = [r for r in (worst - 1, worst + 1) if 0 <= r < cp]
        to = min(neighbours, key=lambda r: peaks[r])
        sizes[worst] -= moved
        sizes[to] += moved
        owner = np.repeat(np.arange(cp, dtype=np.int64), sizes)
    return None


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
        if best is not None and _cannot_win(problem, best, prices):
            continue  # the hand-off, the costliest part of a pricing, is not worth counting
        wave = _priced_ownership(problem, items, layout, layout_name, stats, candidate, split, (q, prices))
        if best is None or _better(wave, best, problem.memory_bytes):
            best = wave
    assert best is not None
    fallback = owner is None and len(owners) > 1 and best.owner is not owners[0]
    if fallback and best.fits(problem.memory_bytes):  # only the token-balanced split fits: repair by time
        repaired = edge_ownership(problem, stats, owners[0])
        if repaired is not None:
            wave = _priced_ownership(problem, items, layout, layout_name, stats, repaired, split)
            if _better(wave, best, problem.memory_bytes):
                best = wave
    return best


def _cannot_win(problem: Problem, best: WavePlan, prices: RankPrices) -> bool:
    """Whether an ownership priced ``prices`` (its hand-off not yet counted) provably loses to ``best``
    (which fits): a version over the budget cannot win, and nor can one whose cost before its hand-off
    (:func:`~cpplan.pricing.evaluator.wave_cost_s`; a hand-off adds seconds, never takes any) is not
    below ``best``'s, since only a strictly cheaper version replaces it."""
    if not best.fits(problem.memory_bytes):
        return False
    over = not (prices.peak_bytes <= problem.memory_bytes).all()
    return over or best.cost_s <= wave_cost_s(problem.card, prices)


def _priced_ownership(
    problem: Problem,
    items: Sequence[int],
    layout: PackedLayout,
    layout_name: str,
    stats: ChunkStats,
    owner: np.ndarray,
    split: bool,
    priced: tuple[np.ndarray, RankPrices] | None = None,
) -> WavePlan:
    """``layout`` with chunk ownership ``owner`` (its rank quantities and prices when already known),
    priced."""
    if priced is None:
        q = rank_quantities(stats, owner, problem.topology.cp)
        priced = (q, price(problem.card, q))
    q, prices = priced
    handoff = chosen_handoff(layout, owner, stats.chunk_tokens, problem.topology.cp, problem.card.handoff)
    return WavePlan(
        items=tuple(items),
        layout_name=layout_name,
        layout=layout,
        stats=stats,
        owner=np.asarray(owner, dtype=np.int64),
        quantities=q,
        prices=prices,
        cost_s=wave_cost_s(problem.card, prices) + handoff.seconds,
        logical_tokens=problem.logical_tokens(items),
        split=split,
        handoff=handoff,
        gdn_handoff=handoff.mode,
    )


def _better(a: WavePlan, b: WavePlan, memory_bytes: int) -> bool:
    fa, fb = a.fits(memory_bytes), b.fits(memory_bytes)
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
    return cheapest_and_lowest(_distinct_waves(problem, tuple(items), layouts), problem.memory_bytes)


def cheapest_and_lowest(waves: Iterable[WavePlan], memory_bytes: int) -> tuple[WavePlan | None, WavePlan]:
    """Of the versions of one wave, the cheapest that fits ``memory_bytes`` (or ``None``; the first
    wins ties) and the lowest-peak one."""
    fitting: WavePlan | None = None
    lowest: WavePlan | None = None
    for wave in waves:
        if wave.fits(memory_bytes) and (fitting is None or wave.cost_s < fitting.cost_s):
            fitting = wave
        if lowest is None or wave.peak_bytes < lowest.peak_bytes:
            lowest = wave
    assert lowest is not None, "a wave has at least one version"
    return fitting, lowest


def first_fitting(
    problem: Problem, items: Sequence[int], layouts: Sequence[str]
) -> tuple[WavePlan | None, WavePlan]:
    """The wave of the first layout (in the order given) that fits, or ``None``; and the lowest-peak
    wave priced. Layouts are priced only until one fits: whether ``items`` fit at all is the same
    answer as :func:`best_wave`'s, usually for one pricing instead of one per layout."""
    lowest: WavePlan | None = None
    for wave in _distinct_waves(problem, tuple(items), layouts):
        if wave.fits(problem.memory_bytes):
            return wave, wave
        if lowest is None or wave.peak_bytes < lowest.peak_bytes:
            lowest = wave
    assert lowest is not None
    return None, lowest


def _distinct_waves(problem: Problem, items: tuple[int, ...], layouts: Sequence[str]) -> Iterator[WavePlan]:
    """The priced wave of each layout that packs ``items`` differently from the layouts before it
    (named by that layout), priced on first use and kept in ``problem.memo``. A later layout that
    shares nothing is left out when :func:`unshared_cannot_fit` proves it over the budget."""
    counts = wave_counts(problem, items)
    cache = problem.memo.priced_waves
    seen: set[bytes] = set()
    for spec in layouts:
        taken = problem.share_mask(spec) & (counts >= 2)
        take = taken.tobytes()
        if take in seen:
            continue
        seen.add(take)
        if seen != {take} and not taken.any() and unshared_cannot_fit(problem, items):
            continue  # no sharing, provably over the budget: not worth packing
        wave = cache.get((items, take))
        if wave is None:
            wave = price_wave(problem, items, problem.pack(items, spec), spec)
            cache[(items, take)] = wave
        elif wave.layout_name != spec:
            wave = replace(wave, layout_name=spec)
        yield wave


def unshared_cannot_fit(problem: Problem, items: tuple[int, ...]) -> bool:
    """Whether ``items`` packed without sharing provably exceed the budget on some rank: every
    request is then stored whole as its own segment, so the wave's totals are known without packing,
    and the busiest rank costs at least the average rank (a peak is a maximum of sums: convex in the
    rank's quantities), counted here with the wave's tokens, attended pairs and segments spread evenly,
    every tokens not owned gathered, and the gradient- or loss-only counts left at zero."""
    lengths = problem.request_tokens[problem.item_requests(items)].astype(np.float64)
    cp = problem.topology.cp
    mean = np.zeros(NUM_QUANTITIES)
    for quantity in QUANTITIES:
        if quantity.only == "all":
            mean[QUANTITY_INDEX[quantity.name]] = _UNSHARED_MEAN[quantity.count](lengths, cp)
    return bool(price(problem.card, mean).peak_bytes[0] > problem.memory_bytes)


_UNSHARED_MEAN = {
    "token": lambda n, cp: n.sum() / cp,
    "pair": lambda n, cp: (n * (n + 1) / 2).sum() / cp,
    "segment": lambda n, cp: n.size / cp,
    "remote": lambda n, cp: n.sum() * (cp - 1) / cp,
}
"""Per count, the average rank's amount when requests of ``n`` tokens are packed without sharing."""
check_rules("pricing.wave.unshared_cannot_fit", _UNSHARED_MEAN, COUNTS)


def wave_counts(problem: Problem, items: tuple[int, ...]) -> np.ndarray:
    """How many of the requests of ``items`` pass through each prefix-tree node (kept in
    ``problem.memo.node_counts``: every layout of a wave, and every strategy, asks for the same)."""
    counts = problem.memo.node_counts.get(items)
    if counts is None:
        counts = problem.memo.node_counts[items] = request_node_counts(problem, problem.item_requests(items))
    return counts


def request_node_counts(problem: Problem, requests: np.ndarray) -> np.ndarray:
    """How many of ``requests`` (tree request indices) pass through each node: one count over their
    concatenated root-to-leaf paths (the same numbers as ``PrefixTree.node_counts``, vectorized)."""
    tree = problem.tree
    starts, ends = tree.path_ptr[requests], tree.path_ptr[requests + 1]
    lengths = ends - starts
    offsets = np.cumsum(lengths) - lengths
    entries = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    return np.bincount(tree.path_nodes[entries], minlength=tree.num_nodes).astype(np.int64)


def local_tokens(wave: WavePlan) -> np.ndarray:
    """Owned packed tokens per rank."""
    return wave.quantities[:, QUANTITY_INDEX["tokens"]].astype(np.int64)
