"""The verifier's own count of a wave's GDN hand-off, piece by piece (no code shared with
:mod:`cpplan.pricing.handoff`), in the mode the plan names (``gdn_handoff``; ``"rounds"`` without it).

A piece is a run of packed tokens of one segment owned by one rank. Walking the pieces in packed order,
each starts from its path predecessor (the previous piece of its segment, or the last piece of its
parent segment); one on another rank is a crossing, and a piece's round is its predecessor's round plus
one for a crossing. In rounds the wave then costs ``(rounds - 1)`` collectives, one state per distinct
source piece, and the recurrence tokens that wait (the sum over rounds of the busiest rank's round
tokens, less the busiest rank's total), each at the card's resolved hand-off seconds. In parallel it
costs, once there is a crossing, one collective, two states per distinct source piece (its map), and
the tokens that wait at that exchange: the busiest rank's runs before it (a piece with no predecessor
once; one with a predecessor that some piece continues from twice) plus the busiest rank's reruns after
it (every piece with a predecessor), less the busiest rank's total. Head-parallel (where the card offers
it) hands no state over: it costs its all-to-alls' latency, the token rows the busiest rank sends or
receives per all-to-all (its owned tokens times ``(cp - 1) / cp``, or the others' tokens over ``cp``,
whichever is more) at the card's seconds per row, and one serial level per prefix-tree level beyond the
first (a segment's level is its parent's plus one); a plan naming it where the card does not offer it
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpplan.spec.card import ResolvedCard
from cpplan.verifier.segments import Segment


@dataclass(frozen=True, kw_only=True)
class _Walk:
    """The pieces' owners, lengths, path predecessors (-1: none) and crossings (a predecessor on
    another rank), and how many distinct pieces are sources (some crossing starts from them)."""

    owner: np.ndarray
    length: np.ndarray
    pred: np.ndarray
    crossing: np.ndarray
    num_sources: int


def handoff_seconds(
    card: ResolvedCard, segments: list[Segment], offsets: list[int], pieces, mode: str = "rounds"
) -> float:
    """Seconds the wave's hand-off adds in ``mode`` (0 on one rank or when the card prices none);
    ``pieces`` are the wave's maximal pieces in packed order
    (:class:`~cpplan.verifier.rank_prices.Pieces`)."""
    if card.topology.cp == 1 or not card.handoff.priced or pieces.owner.size == 0:
        return 0.0
    if mode == "head_parallel":
        return _head_parallel(card, segments, pieces)
    walk = _walk(segments, offsets, pieces)
    if mode == "parallel":
        return _parallel(card, walk)
    return _rounds(card, walk)


def _walk(segments: list[Segment], offsets: list[int], pieces) -> _Walk:
    owner = pieces.owner
    pred = _predecessors(segments, offsets, pieces)
    has = pred >= 0
    crossing = has & (owner[np.maximum(pred, 0)] != owner)
    sources = np.unique(pred[crossing]).size
    return _Walk(owner=owner, length=pieces.length, pred=pred, crossing=crossing, num_sources=sources)


def _predecessors(segments: list[Segment], offsets: list[int], pieces) -> np.ndarray:
    """Each piece's path predecessor: the piece before it where it continues its segment, else the last
    piece of its parent segment so far (-1 for a root's first piece, or a parent with no piece yet).
    Where every segment holds tokens, a segment's pieces come after all of an earlier segment's, so
    the parent's last piece so far is its last piece, or none for a parent that comes later."""
    segment, start = pieces.segment, pieces.start
    offset = np.array(offsets, dtype=np.int64)
    try:
        parent = np.array([s[0] for s in segments], dtype=np.int64)[segment]
    except OverflowError:
        return _predecessors_in_order(segments, offsets, pieces)
    if offset.size > 1 and not bool((offset[1:] > offset[:-1]).all()):
        return _predecessors_in_order(segments, offsets, pieces)
    pred = np.arange(segment.size, dtype=np.int64) - 1
    first = start == offset[segment]
    last = np.searchsorted(segment, parent, side="right") - 1
    found = (parent >= 0) & (parent < segment) & (last >= 0)
    found &= segment[np.maximum(last, 0)] == parent
    pred[first] = np.where(found, last, -1)[first]
    return pred


def _predecessors_in_order(segments: list[Segment], offsets: list[int], pieces) -> np.ndarray:
    """:func:`_predecessors` piece by piece in packed order, whatever order the segments come in."""
    preds: list[int] = []
    last_piece: dict[int, int] = {}
    columns = (pieces.start, pieces.segment)
    for i, (start, segment) in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
        parent = segments[segment][0]
        preds.append(
            i - 1 if start != offsets[segment] else last_piece.get(parent, -1) if parent >= 0 else -1
        )
        last_piece[segment] = i
    return np.array(preds, dtype=np.int64)


def _busiest(owner: np.ndarray, tokens: np.ndarray, cp: int) -> int:
    """The most ``tokens`` any rank ``0 .. cp - 1`` owns (pieces of other owners count for none)."""
    mine = (owner >= 0) & (owner < cp)
    if not mine.all():
        owner, tokens = owner[mine], tokens[mine]
    return int(np.bincount(owner, weights=tokens, minlength=cp).max())


def _rounds(card: ResolvedCard, walk: _Walk) -> float:
    cp, seconds = card.topology.cp, card.handoff
    rounds = [0] * walk.pred.size
    for i, (pred, crossing) in enumerate(zip(walk.pred.tolist(), walk.crossing.tolist(), strict=True)):
        rounds[i] = (rounds[pred] if pred >= 0 else 0) + crossing
    num_rounds = max(rounds) + 1
    mine = (walk.owner >= 0) & (walk.owner < cp)
    cell = walk.owner[mine] * num_rounds + np.array(rounds, dtype=np.int64)[mine]
    work = np.bincount(cell, weights=walk.length[mine], minlength=cp * num_rounds).reshape(cp, num_rounds)
    per_round = int(work.max(axis=0).sum())
    per_rank = int(work.sum(axis=1).max())
    return (
        (num_rounds - 1) * seconds.round_s
        + walk.num_sources * seconds.state_s
        + (per_round - per_rank) * seconds.wait_s_per_token
    )


def _parallel(card: ResolvedCard, walk: _Walk) -> float:
    if not walk.num_sources:
        return 0.0
    cp, seconds = card.topology.cp, card.handoff
    has = walk.pred >= 0
    continued = np.zeros(walk.pred.size, dtype=bool)
    continued[walk.pred[has]] = True
    length = walk.length
    before = np.where(has, np.where(continued, 2 * length, 0), length)
    after = np.where(has, length, 0)
    waiting = (
        _busiest(walk.owner, before, cp) + _busiest(walk.owner, after, cp) - _busiest(walk.owner, length, cp)
    )
    return seconds.round_s + 2 * walk.num_sources * seconds.state_s + waiting * seconds.wait_s_per_token


def _head_parallel(card: ResolvedCard, segments: list[Segment], pieces) -> float:
    cp, seconds = card.topology.cp, card.handoff
    if not seconds.head_parallel_priced:
        return float("inf")
    owned = [0] * cp
    for rank, size in zip(pieces.owner.tolist(), pieces.length.tolist(), strict=True):
        owned[rank] += size
    total = sum(owned)
    moved = max(max(t * (cp - 1) / cp, (total - t) / cp) for t in owned)
    level: list[int] = []
    for parent, *_ in segments:
        level.append(level[parent] + 1 if parent >= 0 else 0)
    extra_levels = max(level) if level else 0
    return seconds.head_collective_s + moved * seconds.head_s_per_token + extra_levels * seconds.head_level_s
