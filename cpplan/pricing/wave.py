"""Pricing one candidate wave exactly: its packed layout, its CP ownership and every rank's peak."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from cpplan.errors import InputError
from cpplan.pricing.evaluator import RankPrices, price, wave_cost_s
from cpplan.pricing.handoff import NO_HANDOFF, Handoff
from cpplan.pricing.handoff_mode import ROUNDS, chosen_handoff
from cpplan.pricing.layout import PackedLayout, path_counts
from cpplan.pricing.ownership import (
    ChunkStats,
    MemoryRoom,
    balanced_owner,
    chunk_stats,
    general_quantities,
    owner_of_ranges,
    range_ends,
    range_quantities,
    rank_quantities,
)
from cpplan.pricing.problem import Problem
from cpplan.pricing.rank_exchanges import can_align, compute_s, pack_groups
from cpplan.pricing.unit_packing import packed_units
from cpplan.pricing.whole_requests import (
    chunk_group_quantities,
    chunk_groups,
    group_loads,
    segment_units,
    unit_quantities,
)
from cpplan.spec.quantities import (
    COUNTS,
    NUM_QUANTITIES,
    QUANTITIES,
    QUANTITY_INDEX,
    SEGMENT_COLUMNS,
    check_rules,
)


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


def ownership_candidates(problem: Problem, layout: PackedLayout, stats: ChunkStats) -> list[np.ndarray]:
    """The ownerships a proposer's wave is priced under: the contiguous splits balanced by predicted
    seconds (attention work included) and by token count (what :func:`edge_ownership` repairs at the
    memory edge), the first with its cuts moved where little of the GDN recurrence waits
    (:func:`cuts_where_little_waits`) and where each barrier is balanced (:func:`barrier_balanced_ends`),
    one balanced split free of ranges
    (:func:`balanced_ownership`), which evens out causal attention where a contiguous split cannot (a
    long sequence's early ranks hold more tokens, its late ranks more attended pairs) and loses where
    its extra pieces and hand-off crossings cost more than it saves, and the whole-request split
    (:func:`whole_request_ownership`: ranks hold whole root subtrees, nothing crosses): the exact price
    decides."""
    return [owner for owner, _ in _candidates(problem, layout, stats)]


def _candidates(
    problem: Problem, layout: PackedLayout, stats: ChunkStats
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`ownership_candidates`, each with its rank quantities (the contiguous splits' from the
    chunks' prefix sums, all at once), repeats left out."""
    cp = problem.topology.cp
    if cp == 1:
        owner = np.zeros(stats.num_chunks, dtype=np.int64)
        return [(owner, rank_quantities(stats, owner, cp))]
    matrix = stats.quantity_matrix()
    splits = [
        range_ends(matrix @ problem.card.constants.time_coefficients, cp),
        range_ends(stats.tokens.astype(np.float64), cp),
    ]
    splits.append(cuts_where_little_waits(layout, stats, splits[0]))
    chunk_barrier_s = matrix @ problem.card.constants.barrier_coefficients.T
    splits.append(barrier_balanced_ends(chunk_barrier_s, cp))
    quantities = range_quantities(stats, splits)
    found: list[tuple[np.ndarray, np.ndarray]] = []
    for i, ends in enumerate(splits):
        if all(ends != splits[j] for j in range(i)):
            found.append((owner_of_ranges(ends), quantities[i]))
    for extra in (_balanced(problem, stats, matrix), _whole(problem, layout, stats, matrix)):
        if extra is not None and not any(np.array_equal(extra[0], owner) for owner, _ in found):
            found.append(extra)
    return found


BARRIER_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Weights of the costliest barrier against the second in :func:`barrier_balanced_ends`'s splits."""


def barrier_balanced_ends(chunk_barrier_s: np.ndarray, num_ranks: int) -> list[int]:
    """The contiguous split, among those balancing a mix of the two costliest barriers' seconds (each
    over its wave total; ``chunk_barrier_s``: per chunk and barrier) in the proportions of
    :data:`BARRIER_WEIGHTS`, whose compute seconds (per barrier the slowest rank, summed) are least
    (the first on ties): a split balanced in total seconds leaves each rank slowest in a different
    barrier."""
    totals = chunk_barrier_s.sum(axis=0)
    largest = np.argsort(-totals, kind="stable")[:2]
    if largest.size < 2 or totals[largest[1]] <= 0:
        return range_ends(chunk_barrier_s.sum(axis=1), num_ranks)
    normalized = chunk_barrier_s[:, largest] / totals[largest]
    splits = [range_ends(normalized @ np.array([w, 1 - w]), num_ranks) for w in BARRIER_WEIGHTS]
    prefix = np.concatenate([np.zeros((1, totals.size)), np.cumsum(chunk_barrier_s, axis=0)])
    ends = np.asarray(splits, dtype=np.int64)
    starts = np.concatenate([np.zeros((ends.shape[0], 1), dtype=np.int64), ends[:, :-1]], axis=1)
    seconds = (prefix[ends] - prefix[starts]).max(axis=1).sum(axis=1)
    return splits[int(np.argmin(seconds))]


def cuts_where_little_waits(layout: PackedLayout, stats: ChunkStats, ends: list[int]) -> list[int]:
    """A contiguous split's ends, each moved by at most a sixteenth of a rank's chunks to where the
    fewest tokens wait for the state handed over at the cut: none at a segment's start, else the cut
    segment's tokens after the cut and every token below it in the prefix tree (a cut inside a leaf
    waits for the leaf's rest, one inside a shared prompt for every completion after it); the nearest
    such end on a tie."""
    cp, num_chunks = len(ends), stats.num_chunks
    below_list, parents = layout.seg_length.astype(np.int64).tolist(), layout.seg_parent.tolist()
    for s in range(layout.num_segments - 1, -1, -1):  # parents come before their children
        if parents[s] >= 0:
            below_list[parents[s]] += below_list[s]
    below = np.array(below_list, dtype=np.int64)
    reach = max(1, num_chunks // (16 * cp))
    moved = list(ends)
    for r in range(cp - 1):
        low, high = max(moved[r - 1] + 1 if r else 1, ends[r] - reach), min(ends[r + 1] - 1, ends[r] + reach)
        if low > high:
            continue
        at = np.arange(low, high + 1)
        segment = stats.first_segment[at]
        waiting = below[segment] - (at * stats.chunk_tokens - layout.seg_offset[segment])
        waiting = np.where(stats.shared_edges[at] == 1, waiting, 0)
        moved[r] = int(at[np.lexsort((np.abs(at - ends[r]), waiting))[0]])
    return moved


def balanced_ownership(problem: Problem, stats: ChunkStats) -> np.ndarray | None:
    """One cheap balanced split free of ranges (:func:`~cpplan.pricing.ownership.balanced_owner`):
    chunks heaviest first by predicted seconds, each to the least-loaded rank. Where that overfills a
    rank (by at most :data:`ROOM_OVERFLOW` of the budget), each chunk goes to the least-loaded rank that
    stays within its memory floors (the rank's pieces counted as they stand when the chunk is placed);
    ``None`` when some chunk then fits no rank, or the plain split is further over."""
    found = _balanced(problem, stats, stats.quantity_matrix())
    return None if found is None else found[0]


def _balanced(
    problem: Problem, stats: ChunkStats, matrix: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`balanced_ownership`, with its rank quantities; ``matrix``: the chunks'
    :meth:`~cpplan.pricing.ownership.ChunkStats.quantity_matrix`."""
    card, cp = problem.card, problem.topology.cp
    weights = matrix @ card.constants.time_coefficients
    owner = balanced_owner(weights, cp)
    q = general_quantities(stats, owner, cp)
    peak_bytes = price(card, q).peak_bytes.max()
    if peak_bytes <= problem.memory_bytes:
        return owner, q
    if peak_bytes > (1 + ROOM_OVERFLOW) * problem.memory_bytes:
        return None
    envelopes = card.envelope_coefficients()
    per_chunk = matrix.copy()
    per_chunk[:, _REMOTE] = -stats.tokens[:, None]  # a rank's remote count: the wave's tokens less its own
    joined = np.zeros_like(matrix)
    joined[:, _SEGMENTS] = stats.shared_edges[:, None]
    baseline = card.envelope_static_bytes + stats.packed_tokens * envelopes[:, _REMOTE].sum(axis=1)
    room = MemoryRoom(
        chunk_bytes=per_chunk @ envelopes.T,
        joined_bytes=joined @ envelopes.T,
        room_bytes=problem.memory_bytes / card.safety - baseline,
    )
    owner = balanced_owner(weights, cp, room=room)
    return None if owner is None else (owner, general_quantities(stats, owner, cp))


def whole_request_ownership(problem: Problem, layout: PackedLayout, stats: ChunkStats) -> np.ndarray | None:
    """Chunk owners under which every rank holds whole root subtrees of the wave's prefix tree (whole
    :func:`~cpplan.pricing.whole_requests.chunk_groups`), bin-packed onto ranks by predicted seconds
    within every rank's memory floors (:func:`~cpplan.pricing.rank_exchanges.pack_groups`); ``None``
    when the wave is one group, some group fits no rank, or some rank would own no chunk."""
    found = _whole(problem, layout, stats, stats.quantity_matrix())
    return None if found is None else found[0]


def _whole(
    problem: Problem, layout: PackedLayout, stats: ChunkStats, matrix: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`whole_request_ownership`, with its rank quantities; ``matrix``: the chunks'
    :meth:`~cpplan.pricing.ownership.ChunkStats.quantity_matrix`."""
    cp = problem.topology.cp
    groups = chunk_groups(layout, stats)
    if not 1 <= groups.max() < MAX_WHOLE_UNITS:
        return None
    per_group = chunk_group_quantities(stats, matrix, groups)
    rank_of = pack_groups(group_loads(problem, per_group, stats.packed_tokens), cp)
    if rank_of is None:
        return None
    owner = rank_of[groups]
    if np.bincount(owner, minlength=cp).min() == 0:
        return None  # every rank of a group runs its own tokens
    return owner, general_quantities(stats, owner, cp)


MAX_WHOLE_UNITS = 256
"""The most units (root subtrees joined by chunks or items) a wave may hold for the whole-request split
and reordering to be tried: their exchange search grows with the units squared, and a wave of hundreds
of small requests loses little to a contiguous split (packing 2,000 small items at CP4 spent 15 of its
17 s there)."""

ROOM_OVERFLOW = 0.1
"""How far over the budget the plain balanced split's peak may be for :func:`balanced_ownership` to
look for one within the memory floors (a pass per chunk over every rank): further over, a scattered
split holds too many pieces' states for the room (a 5,543-chunk wave of 256 requests at CP8, 80 GiB:
104 GiB plain, no split found, 0.28 s spent)."""

_REMOTE = np.array([QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count == "remote"])
_SEGMENTS = np.array(SEGMENT_COLUMNS)
_TOKENS = QUANTITY_INDEX["tokens"]


EDGE_STEPS = 12
"""Repair steps :func:`edge_ownership` takes before it gives up."""


def edge_ownership(problem: Problem, stats: ChunkStats, owner: np.ndarray) -> np.ndarray | None:
    """For a wave at the memory edge: ``owner`` (contiguous, balanced by time) repaired until every
    rank fits, or ``None``. The rank furthest over the budget hands chunks at one end to the neighbour
    with the lower peak, as many as its excess over its bytes per chunk, every step priced exactly;
    the ranks' times stay as close to balanced as the memory allows (the token-balanced split, the
    other fallback, lets them drift further)."""
    repaired = _edge_repair(problem, stats, owner)
    return None if repaired is None else repaired[0]


def _edge_repair(
    problem: Problem, stats: ChunkStats, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray, RankPrices] | None:
    """:func:`edge_ownership`, with the repaired ownership's rank quantities and prices."""
    cp, memory_bytes = problem.topology.cp, problem.memory_bytes
    sizes = np.bincount(owner, minlength=cp)
    static = problem.card.constants.static_peak_bytes
    for _ in range(EDGE_STEPS):
        q = range_quantities(stats, np.cumsum(sizes)[None, :])[0]
        prices = price(problem.card, q)
        peaks = prices.peak_bytes
        worst = int(np.argmax(peaks))
        if peaks[worst] <= memory_bytes:
            return np.repeat(np.arange(cp, dtype=np.int64), sizes), q, prices
        per_chunk = max(peaks[worst] - static, 1.0) / sizes[worst]
        moved = min(int(np.ceil((peaks[worst] - memory_bytes) / per_chunk)), int(sizes[worst]) - 1)
        if moved < 1:
            return None
        neighbours = [r for r in (worst - 1, worst + 1) if 0 <= r < cp]
        to = min(neighbours, key=lambda r: peaks[r])
        sizes[worst] -= moved
        sizes[to] += moved
    return None


def price_wave(
    problem: Problem,
    items: Sequence[int],
    layout: PackedLayout,
    layout_name: str,
    owner: np.ndarray | None = None,
    *,
    split: bool = False,
    beat_s: float = math.inf,
) -> WavePlan:
    """Price ``layout`` for ``items``: with ``owner`` given, that chunk ownership; otherwise the best of
    :func:`ownership_candidates`, the memory edge's repair and (where the problem's
    :attr:`~cpplan.pricing.problem.Problem.reorder_waves` allows it) the items reordered so that ranks
    hold whole units (:func:`_reordered_wave`, tried only where it could cost less than ``beat_s``, the
    price of a fitting version of the wave in hand; ``0``: not tried): the cheapest that fits, else the
    one with the lowest peak."""
    stats = chunk_stats(layout, problem.chunk_tokens)
    if owner is not None:
        owners = [(owner, rank_quantities(stats, owner, problem.topology.cp))]
    else:
        owners = _candidates(problem, layout, stats)
    versions = WaveVersions(
        problem=problem,
        items=tuple(items),
        layout=layout,
        layout_name=layout_name,
        stats=stats,
        split=split,
        logical_tokens=problem.logical_tokens(items),
    )
    best: WavePlan | None = None
    first_fits = False
    for candidate, q in owners:
        prices = price(problem.card, q)
        if best is None:
            first_fits = bool((prices.peak_bytes <= problem.memory_bytes).all())
        elif cannot_win(problem, best, prices):
            continue  # the hand-off, the costliest part of a pricing, is not worth counting
        wave = versions.wave(candidate, q, prices)
        if best is None or better_version(wave, best, problem.memory_bytes):
            best = wave
    assert best is not None
    # only the token-balanced split fits: repair by time (a first split that fits needs no repair:
    # priced already, it lost)
    fallback = owner is None and len(owners) > 1 and best.owner is not owners[0][0] and not first_fits
    if fallback and best.fits(problem.memory_bytes):
        repaired = _edge_repair(problem, stats, owners[0][0])
        if repaired is not None and not cannot_win(problem, best, repaired[2]):
            wave = versions.wave(*repaired)
            if better_version(wave, best, problem.memory_bytes):
                best = wave
    if beat_s > 0 and problem.reorder_waves and owner is None and not split and problem.topology.cp > 1:
        reordered = _reordered_wave(versions, best, beat_s)
        if reordered is not None and better_version(reordered, best, problem.memory_bytes):
            best = reordered
    return best


def whole_request_wave(
    problem: Problem, items: Sequence[int], layout: PackedLayout, layout_name: str, *, polish: bool = False
) -> WavePlan | None:
    """``items`` packed as ``layout_name`` (``layout``: in their given order) with the items reordered
    so that every rank holds whole units and nothing crosses ranks (:func:`_reordered_wave`; ``polish``:
    the packing then split again two ranks at a time, :func:`~cpplan.pricing.rank_pairs.repacked_pairs`),
    priced; ``None`` where no such split is found."""
    versions = WaveVersions(
        problem=problem,
        items=tuple(items),
        layout=layout,
        layout_name=layout_name,
        stats=chunk_stats(layout, problem.chunk_tokens),
        split=False,
        logical_tokens=problem.logical_tokens(items),
    )
    return _reordered_wave(versions, None, polish=polish)


def repacked_wave(problem: Problem, wave: WavePlan) -> WavePlan | None:
    """``wave``'s items with their whole requests packed onto ranks again and the packing polished
    (:func:`whole_request_wave` with ``polish``), under the wave's own layout; ``None`` at one rank, for
    a split wave or one whose layout is no spec, or where no such split is found."""
    if problem.topology.cp == 1 or wave.split:
        return None
    try:
        layout = problem.pack(wave.items, wave.layout_name)
    except InputError:
        return None
    return whole_request_wave(problem, wave.items, layout, wave.layout_name, polish=True)


def _reordered_wave(
    versions: WaveVersions, best: WavePlan | None, beat_s: float = math.inf, *, polish: bool = False
) -> WavePlan | None:
    """The wave with its items reordered so that every rank holds whole units (root subtrees joined by
    items, :func:`~cpplan.pricing.whole_requests.segment_units`) and every rank's block but the last
    ends on a chunk boundary, so nothing crosses ranks: units bin-packed onto ranks by predicted seconds
    within the memory floors, then exchanged until the blocks align
    (:func:`~cpplan.pricing.unit_packing.packed_units`; ``polish``: from a second start too, each
    packing split again two ranks at a time). ``None`` when the wave is one unit, no such split is
    found, some rank would own nothing, its predicted cost does not beat ``best`` (which fits) and
    ``beat_s``, or the layout's name is no layout spec to pack the new order with."""
    problem, layout, items = versions.problem, versions.layout, np.asarray(versions.items, dtype=np.int64)
    cp, chunk_tokens = problem.topology.cp, problem.chunk_tokens
    item_unit, segment_unit = segment_units(
        layout, (problem.item_ptr[items + 1] - problem.item_ptr[items]).tolist()
    )
    if not 1 <= item_unit.max() < MAX_WHOLE_UNITS:
        return None
    per_unit = unit_quantities(layout, segment_unit)
    loads = group_loads(problem, per_unit, layout.packed_tokens)
    unit_tokens = per_unit[:, _TOKENS].astype(np.int64)
    if not can_align(unit_tokens, cp, chunk_tokens):
        return None  # no layout of whole units meets on chunk boundaries
    remote_s = layout.packed_tokens * problem.card.constants.barrier_coefficients[:, _REMOTE].sum()
    if best is not None and best.fits(problem.memory_bytes):
        beat_s = min(beat_s, best.cost_s)
    beat_s -= remote_s + problem.card.wave_overhead_s
    packed = pack_groups(loads, cp)
    if packed is None or compute_s(loads, packed, cp) >= beat_s:
        return None  # aligning the blocks seldom makes a packing cheaper
    rank_of = packed_units(loads, unit_tokens, packed, cp, chunk_tokens, polish=polish)
    if rank_of is None or compute_s(loads, rank_of, cp) >= beat_s:
        return None
    if np.bincount(rank_of, minlength=cp).min() == 0:
        return None  # every rank of a group runs its own tokens
    try:
        mask = problem.share_mask(versions.layout_name)
    except InputError:
        return None
    order = np.lexsort((np.arange(items.size), item_unit, rank_of[item_unit]))
    reordered = problem.pack(items[order], mask)
    if reordered.packed_tokens != layout.packed_tokens or reordered.num_segments != layout.num_segments:
        return None
    stats = chunk_stats(reordered, chunk_tokens)
    ends = np.cumsum(np.bincount(rank_of, weights=unit_tokens, minlength=cp)).astype(np.int64)
    assert (ends[:-1] % chunk_tokens == 0).all(), "every rank's block but the last ends on a chunk boundary"
    owner = np.searchsorted(ends, np.arange(stats.num_chunks) * chunk_tokens, side="right")
    q = general_quantities(stats, owner, cp)
    moved = replace(versions, items=tuple(items[order].tolist()), layout=reordered, stats=stats)
    return moved.wave(owner, q, price(problem.card, q))


def cannot_win(problem: Problem, best: WavePlan, prices: RankPrices) -> bool:
    """Whether an ownership priced ``prices`` (its hand-off not yet counted) provably loses to ``best``
    (which fits): a version over the budget cannot win, and nor can one whose cost before its hand-off
    (:func:`~cpplan.pricing.evaluator.wave_cost_s`; a hand-off adds seconds, never takes any) is not
    below ``best``'s, since only a strictly cheaper version replaces it."""
    if not best.fits(problem.memory_bytes):
        return False
    over = not (prices.peak_bytes <= problem.memory_bytes).all()
    return over or best.cost_s <= wave_cost_s(problem.card, prices)


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveVersions:
    """The versions of one packed wave under different ownerships: what they share (problem, items,
    layout, chunk statistics, unpacked tokens) and each one priced."""

    problem: Problem
    items: tuple[int, ...]
    layout: PackedLayout
    layout_name: str
    stats: ChunkStats
    split: bool
    logical_tokens: int

    def wave(self, owner: np.ndarray, q: np.ndarray, prices: RankPrices) -> WavePlan:
        """The wave under chunk ownership ``owner`` (rank quantities ``q``, priced ``prices``), its
        hand-off chosen and counted."""
        problem = self.problem
        cp = problem.topology.cp
        handoff = chosen_handoff(self.layout, owner, self.stats.chunk_tokens, cp, problem.card.handoff)
        return WavePlan(
            items=self.items,
            layout_name=self.layout_name,
            layout=self.layout,
            stats=self.stats,
            owner=np.asarray(owner, dtype=np.int64),
            quantities=q,
            prices=prices,
            cost_s=wave_cost_s(problem.card, prices) + handoff.seconds,
            logical_tokens=self.logical_tokens,
            split=self.split,
            handoff=handoff,
            gdn_handoff=handoff.mode,
        )


def better_version(a: WavePlan, b: WavePlan, memory_bytes: int) -> bool:
    """Whether version ``a`` of a wave beats ``b``: it fits ``memory_bytes`` where ``b`` does not, or
    both fit and it costs less, or neither fits and its peak is lower."""
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


def whole_item_wave(problem: Problem, item: int) -> WavePlan | None:
    """The cheapest fitting full-sharing wave holding ``item`` alone, or ``None``: the one test of the
    split path. Waves never split an item that some wave holds whole, so where this finds a wave,
    no valid plan splits ``item`` (:func:`~cpplan.planners.greedy.split_item` returns this wave instead,
    and the bound over all plans prices the item whole)."""
    return best_wave(problem, (item,), ("full",))[0]


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
    problem: Problem, items: Sequence[int], layouts: Sequence[str], *, quick: bool = False
) -> tuple[WavePlan | None, WavePlan]:
    """The wave of the first layout (in the order given) that fits, or ``None``; and the lowest-peak
    wave priced. Layouts are priced only until one fits: whether ``items`` fit at all is the same
    answer as :func:`best_wave`'s, usually for one pricing instead of one per layout. ``quick`` (greedy's
    anytime floor, when time is up): a layout not priced yet is priced without the reordering of
    :func:`_reordered_wave`, the costliest search of a pricing."""
    lowest: WavePlan | None = None
    for wave in _distinct_waves(problem, tuple(items), layouts, quick=quick):
        if wave.fits(problem.memory_bytes):
            return wave, wave
        if lowest is None or wave.peak_bytes < lowest.peak_bytes:
            lowest = wave
    assert lowest is not None
    return None, lowest


def _distinct_waves(
    problem: Problem, items: tuple[int, ...], layouts: Sequence[str], *, quick: bool = False
) -> Iterator[WavePlan]:
    """The priced wave of each layout that packs ``items`` differently from the layouts before it
    (named by that layout), priced on first use and kept in ``problem.memo``. A layout priced after a
    cheaper one that fits is reordered only where that could cost less, and not at all when ``quick``
    (a price to beat of 0); such a pricing is kept apart by the price it had to beat, and a full one,
    kept already, is used instead. A later layout that shares nothing is left out when
    :func:`unshared_cannot_fit` proves it over the budget."""
    counts = wave_counts(problem, items)
    cache = problem.memo.priced_waves
    seen: set[bytes] = set()
    beat_s = 0.0 if quick else math.inf  # what a reordering must beat: the cheapest fit yielded so far
    for spec in layouts:
        taken = problem.share_mask(spec) & (counts >= 2)
        take = taken.tobytes()
        if take in seen:
            continue
        seen.add(take)
        if seen != {take} and not taken.any() and unshared_cannot_fit(problem, items):
            continue  # no sharing, provably over the budget: not worth packing
        key = (items, take) if beat_s == math.inf else (items, take, beat_s)
        wave = cache.get((items, take)) or cache.get(key)
        if wave is None:
            wave = price_wave(problem, items, problem.pack(items, spec), spec, beat_s=beat_s)
            cache[key] = wave
        elif wave.layout_name != spec:
            wave = replace(wave, layout_name=spec)
        if wave.fits(problem.memory_bytes):
            beat_s = min(beat_s, wave.cost_s)
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
    return path_counts(problem.tree, requests)


def local_tokens(wave: WavePlan) -> np.ndarray:
    """Owned packed tokens per rank."""
    return wave.quantities[:, QUANTITY_INDEX["tokens"]].astype(np.int64)
