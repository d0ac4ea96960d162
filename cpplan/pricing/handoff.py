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

*Parallel state passing* (``mode="parallel"``, as fla's CP and LASP-2 run it) replaces the rounds: every
rank runs its pieces from a zero state while forming each piece's affine transition ``S_out = A S_in +
B``, one all-gather per GDN layer and pass carries every crossing's ``(A, B)``, and every piece whose
path crosses ranks reruns from its composed initial state. It costs one round, the transitions' bytes
(one per handed-over state) and the rerun of those pieces' tokens on the slowest rank, whatever the
number of rounds. :func:`handoff_modes` prices a wave both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from cpplan.spec.card import HandoffSeconds

HandoffMode = Literal["rounds", "parallel"]
HANDOFF_MODES: tuple[HandoffMode, ...] = ("rounds", "parallel")
"""How a wave's GDN states pass between ranks: round by round, or all at once (parallel)."""


@dataclass(frozen=True, kw_only=True)
class Handoff:
    """A wave's hand-off in one ``mode``: rounds, handed-over states, the tokens that wait (rounds) or
    rerun on the slowest rank (parallel), and the seconds they cost."""

    rounds: int = 1
    crossings: int = 0
    wait_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0
    mode: HandoffMode = "rounds"


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


def handoff_of(
    pieces: Pieces, num_ranks: int, seconds: HandoffSeconds, mode: HandoffMode = "rounds"
) -> Handoff:
    """The rounds, crossings and waiting (or rerun) tokens of ``pieces`` and what they cost under
    ``seconds`` in ``mode``."""
    rounds = int(pieces.round.max()) + 1 if pieces.round.size else 1
    crossings = int(np.unique(pieces.source[pieces.source >= 0]).size)
    if mode == "parallel":
        late = np.where(pieces.round > 0, pieces.length, 0)
        rerun = int(np.bincount(pieces.owner, weights=late, minlength=num_ranks).max()) if late.size else 0
        cost = (
            (seconds.parallel_s if crossings else 0.0)
            + crossings * seconds.parallel_piece_s
            + rerun * seconds.parallel_rerun_s_per_token
        )
        return Handoff(
            rounds=rounds, crossings=crossings, rerun_tokens=rerun, seconds=float(cost), mode="parallel"
        )
    cells = pieces.owner * rounds + pieces.round
    work = np.bincount(cells, weights=pieces.length, minlength=num_ranks * rounds).reshape(num_ranks, rounds)
    wait_tokens = int(work.max(axis=0).sum() - work.sum(axis=1).max())
    cost = (
        (rounds - 1) * seconds.round_s + crossings * seconds.state_s + wait_tokens * seconds.wait_s_per_token
    )
    return Handoff(rounds=rounds, crossings=crossings, wait_tokens=wait_tokens, seconds=float(cost))


def wave_handoff(
    layout,
    owner: np.ndarray,
    chunk_tokens: int,
    num_ranks: int,
    seconds: HandoffSeconds,
    mode: HandoffMode = "rounds",
) -> Handoff:
    """The hand-off of a packed layout under a chunk ownership in ``mode`` (nothing at one rank, or when
    the card prices no hand-off)."""
    if num_ranks == 1 or not seconds.priced:
        return NO_HANDOFF if mode == "rounds" else Handoff(mode=mode)
    pieces = chunk_pieces(layout.seg_offset, layout.seg_length, layout.seg_parent, owner, chunk_tokens)
    return handoff_of(pieces, num_ranks, seconds, mode)


def handoff_modes(
    layout, owner: np.ndarray, chunk_tokens: int, num_ranks: int, seconds: HandoffSeconds
) -> dict[HandoffMode, Handoff]:
    """The wave's hand-off priced in every mode (what a planner choosing the mode per wave compares):
    ``{"rounds": ..., "parallel": ...}``, each from the same pieces."""
    if num_ranks == 1 or not seconds.priced:
        return {
            mode: wave_handoff(layout, owner, chunk_tokens, num_ranks, seconds, mode)
            for mode in HANDOFF_MODES
        }
    pieces = chunk_pieces(layout.seg_offset, layout.seg_length, layout.seg_parent, owner, chunk_tokens)
    return {mode: handoff_of(pieces, num_ranks, seconds, mode) for mode in HANDOFF_MODES}
