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
    each crossing waits for (``source``, -1 where the predecessor is local or absent)."""

    start: np.ndarray
    length: np.ndarray
    owner: np.ndarray
    round: np.ndarray
    source: np.ndarray


def chunk_pieces(
    seg_offset: np.ndarray,
    seg_length: np.ndarray,
    seg_parent: np.ndarray,
    owner: np.ndarray,
    chunk_tokens: int,
) -> Pieces:
    """The pieces of a packed layout under a chunk-to-rank map (vectorized; segments in packed order,
    each parent before its children)."""
    packed = int(seg_offset[-1] + seg_length[-1])
    owner = np.asarray(owner, dtype=np.int64)
    changes = np.flatnonzero(owner[1:] != owner[:-1]) + 1
    bounds = np.unique(np.concatenate([np.asarray(seg_offset, dtype=np.int64), changes * chunk_tokens]))
    start = bounds[bounds < packed]
    length = np.diff(start, append=packed)
    seg = np.searchsorted(seg_offset, start, side="right") - 1
    piece_owner = owner[start // chunk_tokens]
    first = start == seg_offset[seg]
    parent = seg_parent[seg]
    parent_last = np.where(
        parent >= 0, seg_offset[np.maximum(parent, 0)] + seg_length[np.maximum(parent, 0)] - 1, 0
    )
    pred = np.where(
        first,
        np.where(parent >= 0, np.searchsorted(start, parent_last, side="right") - 1, -1),
        np.arange(start.size) - 1,
    )
    crossing = (pred >= 0) & (piece_owner[np.maximum(pred, 0)] != piece_owner)
    return Pieces(
        start=start,
        length=length,
        owner=piece_owner,
        round=_rounds(seg, first, crossing, seg_parent),
        source=np.where(crossing, pred, -1),
    )


def _rounds(seg: np.ndarray, first: np.ndarray, crossing: np.ndarray, seg_parent: np.ndarray) -> np.ndarray:
    """Each piece's round: the crossings on its path up to it. Within a segment, a running count; a
    segment adds its crossings to its parent's total (a prefix sum down the segment tree, by pointer
    jumping)."""
    count = np.cumsum(crossing)
    first_index = np.flatnonzero(first)
    inner = count - count[first_index][seg]  # crossings after the segment's first piece, up to this one
    num_segments = seg_parent.size
    # a segment's own crossings, its first piece's included
    total = np.bincount(seg, weights=crossing, minlength=num_segments).astype(np.int64)
    ancestor = np.asarray(seg_parent, dtype=np.int64)
    while (ancestor >= 0).any():
        has = ancestor >= 0
        total = total + np.where(has, total[np.maximum(ancestor, 0)], 0)
        ancestor = np.where(has, ancestor[np.maximum(ancestor, 0)], -1)
    above = np.where(seg_parent >= 0, total[np.maximum(seg_parent, 0)], 0)
    return above[seg] + crossing[first_index][seg] + inner


def rounds_handoff(pieces: Pieces, num_ranks: int, seconds: HandoffSeconds) -> Handoff:
    """The rounds, crossings and waiting tokens of ``pieces`` passed round by round, and their seconds."""
    rounds = _num_rounds(pieces)
    crossings = _num_crossings(pieces)
    cells = pieces.owner * rounds + pieces.round
    work = np.bincount(cells, weights=pieces.length, minlength=num_ranks * rounds).reshape(num_ranks, rounds)
    wait_tokens = int(work.max(axis=0).sum() - work.sum(axis=1).max())
    cost = (
        (rounds - 1) * seconds.round_s + crossings * seconds.state_s + wait_tokens * seconds.wait_s_per_token
    )
    return Handoff(rounds=rounds, crossings=crossings, wait_tokens=wait_tokens, seconds=float(cost))


def parallel_handoff(
    pieces: Pieces, seg_offset: np.ndarray, seg_parent: np.ndarray, num_ranks: int, seconds: HandoffSeconds
) -> Handoff:
    """``pieces`` (of the segments at ``seg_offset`` with parents ``seg_parent``) passed in parallel:
    the tokens that wait at the exchange, the busiest rank's reruns, and their seconds (0 without
    crossings)."""
    rounds = _num_rounds(pieces)
    crossings = _num_crossings(pieces)
    if not crossings:
        return Handoff(rounds=rounds, mode=PARALLEL)
    seg = np.searchsorted(seg_offset, pieces.start, side="right") - 1
    first = pieces.start == seg_offset[seg]
    from_zero = first & (seg_parent[seg] < 0)
    parents = np.zeros(seg_parent.size, dtype=bool)
    parents[seg_parent[seg_parent >= 0]] = True
    same_next = np.r_[seg[1:] == seg[:-1], False]
    has_successor = same_next | (~same_next & parents[seg])
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


def _num_rounds(pieces: Pieces) -> int:
    return int(pieces.round.max()) + 1 if pieces.round.size else 1


def _num_crossings(pieces: Pieces) -> int:
    return int(np.unique(pieces.source[pieces.source >= 0]).size)


def head_parallel_handoff(
    layout, owner: np.ndarray, chunk_tokens: int, num_ranks: int, seconds: HandoffSeconds
) -> Handoff | None:
    """A packed layout's GDN layers run head-parallel under a chunk ownership
    (:mod:`cpplan.pricing.head_parallel`); ``None`` where the card does not offer it (or at one rank)."""
    priced = head_parallel_price(layout, owner, chunk_tokens, num_ranks, seconds)
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
    pieces = chunk_pieces(layout.seg_offset, layout.seg_length, layout.seg_parent, owner, chunk_tokens)
    modes = {
        ROUNDS: rounds_handoff(pieces, num_ranks, seconds),
        PARALLEL: parallel_handoff(pieces, layout.seg_offset, layout.seg_parent, num_ranks, seconds),
    }
    heads = head_parallel_handoff(layout, owner, chunk_tokens, num_ranks, seconds)
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
