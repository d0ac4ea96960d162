"""The verifier's own pricing of a wave: per-rank local quantities summed from the owners and the
segment tree, then peaks and seconds from the resolved card's terms with plain Python arithmetic (no
code shared with the numpy evaluator).

The wave is cut into *pieces*: maximal runs of packed tokens inside one segment with one owner (cut at
every segment start and every change of owner). A piece of ``n`` tokens at request positions
``p .. p + n - 1`` adds ``n`` to a per-token count and ``(p + 1) + ... + (p + n)`` to a per-attended-key
count, so the work grows with segments and owned ranges, not with tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from cpplan.spec.card import ResolvedCard
from cpplan.spec.quantities import COUNTS, QUANTITIES, QUANTITY_NAMES, check_rules
from cpplan.verifier.card_terms import CardTerms
from cpplan.verifier.chains import Coverage
from cpplan.verifier.claims import RankPrice, check_rank_claims, close
from cpplan.verifier.handoff_recount import handoff_seconds
from cpplan.verifier.owners import OwnerRuns
from cpplan.verifier.segments import Segment

_PER_RUN = {
    "token": lambda first, n: n,
    "pair": lambda first, n: n * (2 * first + n + 1) // 2,
}
"""What ``n`` owned tokens at consecutive positions ``first .. first + n - 1`` add to a per-token count:
one each, or the keys each attends (position + 1), an arithmetic series."""
check_rules("verifier.rank_prices", (*_PER_RUN, "segment", "remote"), COUNTS)


@dataclass(frozen=True, kw_only=True)
class Pieces:
    """Runs of packed tokens inside one segment with one owner: owner, segment, the packed position and
    the request position of the first token, and the number of tokens, one entry per piece in packed
    order."""

    owner: np.ndarray
    segment: np.ndarray
    start: np.ndarray
    first: np.ndarray
    length: np.ndarray

    def merged(self) -> Pieces:
        """The maximal pieces: neighbours with the same owner and segment joined (ownership given as
        two touching ranges of one rank is one piece)."""
        if self.owner.size < 2:
            return self
        joined = (self.owner[1:] == self.owner[:-1]) & (self.segment[1:] == self.segment[:-1])
        if not joined.any():
            return self
        heads = np.flatnonzero(np.concatenate([[True], ~joined]))
        return Pieces(
            owner=self.owner[heads],
            segment=self.segment[heads],
            start=self.start[heads],
            first=self.first[heads],
            length=np.add.reduceat(self.length, heads),
        )


def pieces_of(segments: list[Segment], offsets: list[int], runs: OwnerRuns) -> Pieces:
    """Cut the wave at every segment start and every ownership boundary."""
    return _cut(np.array(offsets, dtype=np.int64), _positions(segments), runs)


def _positions(segments: list[Segment]) -> np.ndarray:
    """Each segment's request position (where its first token sits in the requests through it)."""
    return np.array([s[1] for s in segments], dtype=np.int64)


def _cut(seg_offset: np.ndarray, seg_start: np.ndarray, runs: OwnerRuns) -> Pieces:
    """:func:`pieces_of`, from the segments' packed offsets and request positions."""
    cuts = np.concatenate((seg_offset, runs.start))
    cuts.sort()
    keep = cuts < runs.packed
    keep[1:] &= cuts[1:] != cuts[:-1]
    cuts = cuts[keep]
    ends = np.append(cuts[1:], runs.packed)
    segment = np.searchsorted(seg_offset, cuts, side="right") - 1
    run = np.searchsorted(runs.start, cuts, side="right") - 1
    return Pieces(
        owner=runs.owner[run],
        segment=segment,
        start=cuts,
        first=seg_start[segment] + (cuts - seg_offset[segment]),
        length=ends - cuts,
    ).merged()


def price_ranks(
    w: int,
    wave: dict[str, Any],
    segments: list[Segment],
    offsets: list[int],
    runs: OwnerRuns,
    coverage: Coverage,
    priced_by: tuple[ResolvedCard, CardTerms],
    memory_bytes: int,
    violations: list[str],
) -> tuple[float, int]:
    """Price every rank of the wave by the card of its group (and that card's terms), check it against
    the budget and the plan's claims; the wave's cost (per barrier the slowest rank, summed, plus
    overhead and the hand-off in the wave's ``gdn_handoff`` mode) and its worst peak."""
    card, terms = priced_by
    cp = card.topology.cp
    seg_start = _positions(segments)
    pieces = _cut(np.array(offsets, dtype=np.int64), seg_start, runs)
    flags = {"grad": np.array(coverage.grad, dtype=bool), "loss": np.array(coverage.loss, dtype=bool)}
    masked = {"loss": coverage.masked_loss} if coverage.masked_loss else {}
    per_rank = rank_sums(pieces, flags, runs.packed, cp, masked=masked, seg_start=seg_start)
    claimed = {int(r["rank"]): r for r in wave["ranks"]}
    slowest: dict[int, float] = {}
    worst = 0
    columns = {name: values.tolist() for name, values in per_rank.items()}
    for rank in range(cp):
        local = {name: values[rank] for name, values in columns.items()}
        quantities = tuple(local[name] for name in QUANTITY_NAMES)
        priced = _price_rank(card, terms, quantities)
        for barrier, seconds in priced.barrier_s.items():
            slowest[barrier] = max(slowest.get(barrier, 0.0), seconds)
        worst = max(worst, priced.peak_bytes)
        if priced.peak_bytes > memory_bytes:
            violations.append(
                f"wave {w} rank {rank}: predicted peak {priced.peak_bytes:,} bytes exceeds the budget of "
                f"{memory_bytes:,} bytes"
            )
        if rank in claimed:
            where = f"wave {w} rank {rank}"
            check_rank_claims(where, claimed[rank], local, priced, priced_by, violations)
    compute = math.fsum(slowest.values())
    mode = wave.get("gdn_handoff", "rounds")
    if mode == "head_parallel" and cp > 1 and card.handoff.priced and not card.handoff.head_parallel_priced:
        violations.append(
            f"wave {w}: gdn_handoff 'head_parallel' but the card does not offer it at CP {cp} (its GDN "
            "value heads must divide over the CP ranks: cost.handoff.head_parallel_when)"
        )
    cost = compute + card.wave_overhead_s + handoff_seconds(card, segments, offsets, pieces, mode)
    if "cost_s" in wave and not close(float(wave["cost_s"]), cost):
        violations.append(
            f"wave {w}: cost_s {wave['cost_s']} but the verifier prices {cost} (GDN hand-off {mode!r})"
        )
    return cost, worst


def rank_sums(
    pieces: Pieces,
    seg_flags: dict[str, np.ndarray],
    packed: int,
    cp: int,
    *,
    masked: dict[str, dict[int, np.ndarray]] | None = None,
    seg_start: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Every local quantity of the registry per rank, counted the way its entry states: per owned token
    (1, or position + 1 keys for a pair count; only tokens of segments whose ``grad`` / ``loss`` flag is
    set where the entry says so), pieces owned (``pieces`` must be the maximal ones: runs of one
    segment on the rank), or packed tokens not owned. Pieces owned by no rank (or by a rank outside
    ``0..cp-1``) count for none.

    ``masked[flag][s]`` marks, token by token, more tokens of segment ``s`` that carry ``flag`` though
    the segment's flag is off (the tokens whose logits a request with a loss mask needs; segment ``s``
    starts at request position ``seg_start[s]``); they are counted from per-segment prefix sums, so the
    work grows with the masked segments, not with the wave."""
    sums = {name: np.zeros(cp, dtype=np.int64) for name in QUANTITY_NAMES}
    owner, segment, first, length = pieces.owner, pieces.segment, pieces.first, pieces.length
    mine = (owner >= 0) & (owner < cp)
    if not mine.all():
        owner, segment, first, length = owner[mine], segment[mine], first[mine], length[mine]
    per_run: dict[str, np.ndarray] = {}
    flags: dict[str, np.ndarray] = {}
    for q in QUANTITIES:
        if q.count in _PER_RUN:
            if q.count not in per_run:
                per_run[q.count] = _PER_RUN[q.count](first, length)
            values = per_run[q.count]
            if q.only != "all":
                if q.only not in flags:
                    flags[q.only] = seg_flags[q.only][segment]
                flagged = flags[q.only]
                values = values * flagged
                extra = (masked or {}).get(q.only)
                if extra:
                    values = values + _masked_sums(q.count, extra, segment, first, length, flagged, seg_start)
            sums[q.name] = np.bincount(owner, weights=values, minlength=cp).astype(np.int64)
        elif q.count == "segment":
            sums[q.name] = np.bincount(owner, minlength=cp)[:cp].astype(np.int64)
    owned = np.bincount(owner, weights=length, minlength=cp).astype(np.int64)
    for q in QUANTITIES:
        if q.count == "remote":
            sums[q.name] = packed - owned
    return sums


def _masked_sums(
    count: str,
    needed: dict[int, np.ndarray],
    segment: np.ndarray,
    first: np.ndarray,
    length: np.ndarray,
    flagged: np.ndarray,
    seg_start: np.ndarray | None,
) -> np.ndarray:
    """Per piece, what its tokens marked in ``needed[segment]`` add to a per-token count (zero for a
    piece whose segment is flagged whole, or has no marks)."""
    assert seg_start is not None, "masked tokens need the segments' start positions"
    out = np.zeros(segment.size, dtype=np.int64)
    for s, marks in needed.items():
        pieces = np.flatnonzero((segment == s) & ~flagged)
        if pieces.size == 0:
            continue
        positions = int(seg_start[s]) + np.arange(marks.size, dtype=np.int64)
        per_token = _PER_RUN[count](positions, np.ones_like(positions)) * marks.astype(np.int64)
        prefix = np.concatenate([[0], np.cumsum(per_token)])
        lo = np.minimum(first[pieces] - int(seg_start[s]), marks.size)
        hi = np.minimum(lo + length[pieces], marks.size)
        out[pieces] = prefix[hi] - prefix[lo]
    return out


def _price_rank(card: ResolvedCard, terms: CardTerms, quantities: tuple[int, ...]) -> RankPrice:
    """``ceil(safety * max over envelopes of (static + the envelope's terms))``, the binding envelope
    (the first of the largest) and the seconds of each barrier."""
    best, binding = -math.inf, 0
    for e, envelope in enumerate(terms.envelopes):
        total = envelope.static_bytes
        for unit_bytes, q in envelope.terms:
            total += unit_bytes * quantities[q]
        if total > best:
            best, binding = total, e
    return RankPrice(
        peak_bytes=math.ceil(card.safety * best),
        card_peak_bytes=math.ceil(card.safety * best / card.memory_scale),
        envelope=binding,
        envelope_bytes=best,
        quantities=quantities,
        barrier_s=_barrier_seconds(terms, quantities),
    )


def _barrier_seconds(terms: CardTerms, quantities: tuple[int, ...]) -> dict[int, float]:
    """The rank's seconds within each barrier: the sum of the card's cost terms that run between that
    barrier's collectives (keyed by the barrier's index in :data:`cpplan.spec.card.BARRIERS`)."""
    return {
        barrier: math.fsum([seconds * quantities[q] for seconds, q in costs])
        for barrier, costs in terms.barriers
    }
