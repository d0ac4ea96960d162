"""The GDN state hand-off of one wave: its pieces, their rounds, and the seconds they add to the wave.

This prices what the CP execution path does (:mod:`cpplan.hf.gdn`, ``docs/hf.md``). A *piece* is a
maximal run of one segment's packed tokens owned by one rank. Each piece starts from the state after its
path predecessor: the previous piece of its segment, or, for a segment's first piece, the piece holding
its parent segment's last token (none for a root segment). A piece whose predecessor lies on another
rank is a *crossing*: it waits for that rank's state. Pieces run in *rounds*: a piece's round is the
number of crossings on its path up to and including it, and after each round one all-gather per GDN
layer carries that round's states. So a wave with ``R`` rounds adds, per GDN layer and pass, ``R - 1``
sequential collectives, the bytes of every handed-over state (each source piece sent once), and the
recurrence work that waits: ``sum_k max_r W[r, k] - max_r sum_k W[r, k]`` tokens, where ``W[r, k]`` is
rank ``r``'s tokens in round ``k`` (the slowest rank's own total is already in its per-rank time).
Each extra round is also one more serial call of the recurrence kernel per GDN layer and pass, so the
card's ``round_seconds`` holds that call's launch floor beside the collective.

*Parallel state passing* (``mode="parallel"``, :mod:`cpplan.hf.gdn_parallel`) replaces the rounds:
every rank runs its pieces at once from a zero state while forming each piece's affine state map, one
collective carries the maps, and every piece that does not start from zero runs again from its true
state. Per GDN layer and pass, with the same card terms: ``round_s + 2 crossings state_s`` (each
crossing sends a map ``[A | B]``: the transition, ``key dim x key dim``, and the zero-state final state,
one state's bytes each at Qwen3.5/3.6's ``key dim = value dim``) ``+ (max_r before_r + max_r after_r -
max_r T_r) x wait_s_per_token``: the exchange is a barrier between the runs before it (``before_r``: rank
``r``'s tokens of pieces starting from zero, and twice those of pieces with both a source and a
successor, run from zero for ``B`` and from the identity for ``A``) and the reruns after it
(``after_r``: its tokens of pieces with a source); the per-rank time already counts each rank's ``T_r``
tokens once. Nothing without a crossing.

:func:`rounds_handoff` and :func:`parallel_handoff` are the one price of each mode (the planners' choice,
the wave's cost, the CP-SAT columns and ``benchmarks/cp_scaling.py`` all read them);
:func:`handoff_modes` prices a wave every way from the same pieces, head-parallel
(:func:`head_parallel_handoff`) included where the card offers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from cpplan.pricing.head_parallel import head_parallel_price
from cpplan.pricing.layout import PackedLayout, SegmentLinks, parent_segments
from cpplan.spec.card import HandoffSeconds

HandoffMode = Literal["rounds", "parallel", "head_parallel"]
ROUNDS: HandoffMode = "rounds"
PARALLEL: HandoffMode = "parallel"
HEAD_PARALLEL: HandoffMode = "head_parallel"
HANDOFF_MODES: tuple[HandoffMode, ...] = (ROUNDS, PARALLEL, HEAD_PARALLEL)
"""How a wave's GDN states pass between ranks: round by round, all at once (parallel), or not at all
(head-parallel: every rank runs the whole wave's recurrence for its share of the heads, between two
all-to-alls per GDN layer and pass; priced in :mod:`cpplan.pricing.head_parallel`)."""


@dataclass(frozen=True, kw_only=True)
class Handoff:
    """A wave's hand-off in one ``mode``: its pieces' rounds, handed-over states, the recurrence tokens
    that wait (on earlier rounds, or at the parallel exchange), the tokens the busiest rank reruns
    (parallel), the token rows the busiest rank moves per all-to-all and the prefix-tree levels run one
    after another (head-parallel), and the seconds they cost."""

    rounds: int = 1
    crossings: int = 0
    wait_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0
    mode: HandoffMode = "rounds"
    moved_rows: float = 0.0
    levels: int = 0


NO_HANDOFF = Handoff()


@dataclass(frozen=True, kw_only=True, eq=False)
class Pieces:
    """A wave's pieces in packed order: ``start``, ``length``, ``owner``, ``round`` and the source piece
    each crossing waits for (``source``, -1 where the predecessor is local or absent); ``segment``: each
    piece's segment, ``first``: whether it is its segment's first piece; ``num_rounds``: the most
    crossings on a piece's path, plus one; ``num_crossings``: the handed-over states (distinct
    sources)."""

    start: np.ndarray
    length: np.ndarray
    owner: np.ndarray
    round: np.ndarray
    source: np.ndarray
    segment: np.ndarray
    first: np.ndarray
    num_rounds: int
    num_crossings: int


def chunk_pieces(
    seg_offset: np.ndarray,
    seg_length: np.ndarray,
    seg_parent: np.ndarray,
    owner: np.ndarray,
    chunk_tokens: int,
) -> Pieces:
    """The pieces of a packed layout under a chunk-to-rank map (vectorized; segments in packed order,
    each parent before its children)."""
    return layout_pieces(SegmentLinks.of(seg_offset, seg_length, seg_parent), owner, chunk_tokens)


def layout_pieces(links: SegmentLinks, owner: np.ndarray, chunk_tokens: int) -> Pieces:
    """:func:`chunk_pieces` of the segments ``links`` describes (what it keeps of them is reused)."""
    seg_offset, packed = links.seg_offset, links.packed_tokens
    owner = np.asarray(owner, dtype=np.int64)
    changes = np.flatnonzero(owner[1:] != owner[:-1]) + 1
    bounds = np.unique(np.concatenate([seg_offset, changes * chunk_tokens]))
    start = bounds[bounds < packed]
    length = np.empty_like(start)
    length[:-1] = start[1:] - start[:-1]
    length[-1] = packed - start[-1]
    seg = np.searchsorted(seg_offset, start, side="right") - 1
    piece_owner = owner[start // chunk_tokens]
    first = start == seg_offset[seg]
    # a first piece follows its parent's last token (none for a root: -1), any other the piece before
    pred = np.where(
        first, np.searchsorted(start, links.parent_last[seg], side="right") - 1, np.arange(-1, start.size - 1)
    )
    crossing = (pred >= 0) & (piece_owner[pred] != piece_owner)
    rounds = _rounds(seg, first, crossing, links)
    sources = np.zeros(start.size, dtype=bool)
    sources[pred[crossing]] = True
    return Pieces(
        start=start,
        length=length,
        owner=piece_owner,
        round=rounds,
        source=np.where(crossing, pred, -1),
        segment=seg,
        first=first,
        num_rounds=int(rounds.max()) + 1 if rounds.size else 1,
        num_crossings=int(np.count_nonzero(sources)),
    )


def _rounds(seg: np.ndarray, first: np.ndarray, crossing: np.ndarray, links: SegmentLinks) -> np.ndarray:
    """Each piece's round: the crossings on its path up to it. Within a segment, a running count; a
    segment adds its crossings to its parent's total (a prefix sum down the segment tree, by pointer
    jumping: :meth:`~cpplan.pricing.layout.SegmentLinks.down_sums`)."""
    count = np.cumsum(crossing)
    before = (count - crossing)[np.flatnonzero(first)]  # per segment, the crossings before its first piece
    own = np.bincount(seg, weights=crossing, minlength=links.num_segments)  # a segment's own crossings
    above = links.down_sums(own)[links.parent_or_end]  # its ancestors' crossings (0 for a root)
    return (above - before)[seg] + count


def rounds_handoff(pieces: Pieces, num_ranks: int, seconds: HandoffSeconds) -> Handoff:
    """The rounds, crossings and waiting tokens of ``pieces`` passed round by round, and their seconds."""
    rounds = pieces.num_rounds
    crossings = pieces.num_crossings
    wait_tokens = 0  # one round: nothing waits
    if rounds > 1:
        cells = pieces.owner * rounds + pieces.round
        work = np.bincount(cells, weights=pieces.length, minlength=num_ranks * rounds).reshape(
            num_ranks, rounds
        )
        wait_tokens = int(work.max(axis=0).sum() - work.sum(axis=1).max())
    cost = (
        (rounds - 1) * seconds.round_s + crossings * seconds.state_s + wait_tokens * seconds.wait_s_per_token
    )
    return Handoff(rounds=rounds, crossings=crossings, wait_tokens=wait_tokens, seconds=float(cost))


def parallel_handoff(
    pieces: Pieces, seg_offset: np.ndarray, seg_parent: np.ndarray, num_ranks: int, seconds: HandoffSeconds
) -> Handoff:
    """``pieces`` (of the segments at ``seg_offset`` with parents ``seg_parent``, as :func:`chunk_pieces`
    cut them) passed in parallel: the tokens that wait at the exchange, the busiest rank's reruns, and
    their seconds (0 without crossings)."""
    is_root = np.asarray(seg_parent) < 0
    return _parallel_handoff(pieces, is_root, parent_segments(seg_parent), num_ranks, seconds)


def _parallel_handoff(
    pieces: Pieces, is_root: np.ndarray, is_parent: np.ndarray, num_ranks: int, seconds: HandoffSeconds
) -> Handoff:
    """:func:`parallel_handoff` of segments with these flags: per segment, whether it is a root and
    whether it is a parent."""
    rounds = pieces.num_rounds
    crossings = pieces.num_crossings
    if not crossings:
        return Handoff(rounds=rounds, mode=PARALLEL)
    seg, first = pieces.segment, pieces.first
    from_zero = first & is_root[seg]
    # a successor: the segment's next piece, or, after its last piece, its children
    has_successor = is_parent[seg]
    has_successor[:-1] |= ~first[1:]
    before = pieces.length * np.where(from_zero, 1, 2 * has_successor)
    after = pieces.length * ~from_zero

    def busiest(weights: np.ndarray) -> int:
        return int(np.bincount(pieces.owner, weights=weights, minlength=num_ranks).max())

    rerun = busiest(after)
    wait_tokens = busiest(before) + rerun - busiest(pieces.length)
    cost = seconds.round_s + 2 * crossings * seconds.state_s + wait_tokens * seconds.wait_s_per_token
    return Handoff(
        rounds=rounds,
        crossings=crossings,
        wait_tokens=wait_tokens,
        rerun_tokens=rerun,
        seconds=float(cost),
        mode=PARALLEL,
    )


def head_parallel_handoff(
    layout,
    owner: np.ndarray,
    chunk_tokens: int,
    num_ranks: int,
    seconds: HandoffSeconds,
    *,
    levels: int | None = None,
) -> Handoff | None:
    """A packed layout's GDN layers run head-parallel under a chunk ownership
    (:mod:`cpplan.pricing.head_parallel`); ``None`` where the card does not offer it (or at one rank).
    ``levels``: the layout's tree levels, when known."""
    priced = head_parallel_price(layout, owner, chunk_tokens, num_ranks, seconds, levels=levels)
    if priced is None:
        return None
    moved, levels, cost = priced
    return Handoff(rounds=1, moved_rows=moved, levels=levels, seconds=cost, mode=HEAD_PARALLEL)


def handoff_modes(
    layout, owner: np.ndarray, chunk_tokens: int, num_ranks: int, seconds: HandoffSeconds
) -> dict[HandoffMode, Handoff]:
    """A packed layout's hand-off under a chunk ownership priced in every mode the card offers, each
    from the same ownership: ``{"rounds": ..., "parallel": ...}``, and ``"head_parallel"`` where the
    card prices it (:mod:`cpplan.pricing.head_parallel`); nothing at one rank, or when the card prices
    none."""
    if num_ranks == 1 or not seconds.priced:
        return {mode: Handoff(mode=mode) for mode in HANDOFF_MODES}
    links = (
        layout.links
        if isinstance(layout, PackedLayout)
        else SegmentLinks.of(layout.seg_offset, layout.seg_length, layout.seg_parent)
    )
    pieces = layout_pieces(links, owner, chunk_tokens)
    modes = {
        ROUNDS: rounds_handoff(pieces, num_ranks, seconds),
        PARALLEL: _parallel_handoff(pieces, links.is_root, links.is_parent, num_ranks, seconds),
    }
    heads = head_parallel_handoff(layout, owner, chunk_tokens, num_ranks, seconds, levels=links.levels)
    if heads is not None:
        modes[HEAD_PARALLEL] = heads
    return modes


def wave_handoff(
    layout,
    owner: np.ndarray,
    chunk_tokens: int,
    num_ranks: int,
    seconds: HandoffSeconds,
    mode: HandoffMode = ROUNDS,
) -> Handoff:
    """The hand-off of a packed layout under a chunk ownership in ``mode``."""
    return handoff_modes(layout, owner, chunk_tokens, num_ranks, seconds)[mode]
