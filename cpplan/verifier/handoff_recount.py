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

from cpplan.spec.card import ResolvedCard
from cpplan.verifier.card_terms import card_terms
from cpplan.verifier.segments import Segment


@dataclass(frozen=True, kw_only=True)
class _Walk:
    """The pieces' owners, lengths, path predecessors (-1: none) and rounds, and the source pieces."""

    owner: list[int]
    length: list[int]
    pred: list[int]
    round: list[int]
    sources: frozenset[int]


def handoff_seconds(
    card: ResolvedCard, segments: list[Segment], offsets: list[int], pieces, mode: str = "rounds"
) -> float:
    """Seconds the wave's hand-off adds in ``mode`` (0 on one rank or when the card prices none);
    ``pieces`` are the wave's maximal pieces in packed order
    (:class:`~cpplan.verifier.rank_prices.Pieces`)."""
    if card.topology.cp == 1 or not card_terms(card).handoff_priced or pieces.owner.size == 0:
        return 0.0
    if mode == "head_parallel":
        return _head_parallel(card, segments, pieces)
    walk = _walk(segments, offsets, pieces)
    if mode == "parallel":
        return _parallel(card, walk)
    return _rounds(card, walk)


def _walk(segments: list[Segment], offsets: list[int], pieces) -> _Walk:
    owner, length, preds, rounds, sources = [], [], [], [], set()
    last_piece: dict[int, int] = {}
    columns = (pieces.start, pieces.length, pieces.owner, pieces.segment)
    for i, (start, size, rank, segment) in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
        parent = segments[segment][0]
        pred = i - 1 if start != offsets[segment] else last_piece.get(parent, -1) if parent >= 0 else -1
        crossing = pred >= 0 and owner[pred] != rank
        if crossing:
            sources.add(pred)
        rounds.append((rounds[pred] if pred >= 0 else 0) + int(crossing))
        owner.append(rank)
        length.append(size)
        preds.append(pred)
        last_piece[segment] = i
    return _Walk(owner=owner, length=length, pred=preds, round=rounds, sources=frozenset(sources))


def _rounds(card: ResolvedCard, walk: _Walk) -> float:
    cp, seconds = card.topology.cp, card.handoff
    work: dict[tuple[int, int], int] = {}
    for rank, round_, size in zip(walk.owner, walk.round, walk.length, strict=True):
        work[(rank, round_)] = work.get((rank, round_), 0) + size
    rounds = max(walk.round) + 1
    per_round = sum(max(work.get((r, k), 0) for r in range(cp)) for k in range(rounds))
    per_rank = max(sum(work.get((r, k), 0) for k in range(rounds)) for r in range(cp))
    return (
        (rounds - 1) * seconds.round_s
        + len(walk.sources) * seconds.state_s
        + (per_round - per_rank) * seconds.wait_s_per_token
    )


def _parallel(card: ResolvedCard, walk: _Walk) -> float:
    if not walk.sources:
        return 0.0
    cp, seconds = card.topology.cp, card.handoff
    continued = {p for p in walk.pred if p >= 0}
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    total: dict[int, int] = {}
    for i, (rank, pred, size) in enumerate(zip(walk.owner, walk.pred, walk.length, strict=True)):
        total[rank] = total.get(rank, 0) + size
        if pred < 0:
            before[rank] = before.get(rank, 0) + size
            continue
        after[rank] = after.get(rank, 0) + size
        if i in continued:
            before[rank] = before.get(rank, 0) + 2 * size

    def busiest(tokens: dict[int, int]) -> int:
        return max(tokens.get(r, 0) for r in range(cp))

    waiting = busiest(before) + busiest(after) - busiest(total)
    return seconds.round_s + 2 * len(walk.sources) * seconds.state_s + waiting * seconds.wait_s_per_token


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
