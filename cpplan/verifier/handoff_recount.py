"""The verifier's own count of a wave's GDN hand-off, piece by piece (no code shared with
:mod:`cpplan.pricing.handoff`).

A piece is a run of packed tokens of one segment owned by one rank. Walking the pieces in packed order,
each starts from its path predecessor (the previous piece of its segment, or the last piece of its
parent segment); one on another rank is a crossing, and a piece's round is its predecessor's round plus
one for a crossing. The wave then costs ``(rounds - 1)`` collectives, one state per distinct source
piece, and the recurrence tokens that wait (the sum over rounds of the busiest rank's round tokens, less
the busiest rank's total), each at the card's resolved hand-off seconds.
"""

from __future__ import annotations

from cpplan.spec.card import ResolvedCard
from cpplan.verifier.segments import Segment


def handoff_seconds(card: ResolvedCard, segments: list[Segment], offsets: list[int], pieces) -> float:
    """Seconds the wave's hand-off adds (0 on one rank or when the card prices none); ``pieces`` are the
    wave's maximal pieces in packed order (:class:`~cpplan.verifier.rank_prices.Pieces`)."""
    seconds = card.handoff
    if card.topology.cp == 1 or not seconds.priced or pieces.owner.size == 0:
        return 0.0
    piece_owner, piece_round, sources = [], [], set()
    last_piece: dict[int, int] = {}
    work: dict[tuple[int, int], int] = {}
    columns = (pieces.start, pieces.length, pieces.owner, pieces.segment)
    for i, (start, length, rank, segment) in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
        parent = segments[segment][0]
        pred = i - 1 if start != offsets[segment] else last_piece.get(parent, -1) if parent >= 0 else -1
        crossing = pred >= 0 and piece_owner[pred] != rank
        if crossing:
            sources.add(pred)
        round_ = (piece_round[pred] if pred >= 0 else 0) + int(crossing)
        piece_owner.append(rank)
        piece_round.append(round_)
        last_piece[segment] = i
        work[(rank, round_)] = work.get((rank, round_), 0) + length
    rounds = max(piece_round) + 1
    per_round = sum(max(work.get((r, k), 0) for r in range(card.topology.cp)) for k in range(rounds))
    per_rank = max(sum(work.get((r, k), 0) for k in range(rounds)) for r in range(card.topology.cp))
    return (
        (rounds - 1) * seconds.round_s
        + len(sources) * seconds.state_s
        + (per_round - per_rank) * seconds.wait_s_per_token
    )
