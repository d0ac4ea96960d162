"""Index plans for one wave, shared by every layer: who owns what, what each rank must receive.

Built once per wave from the :class:`~cpplan.RankBatch` of every CP rank (whole-wave metadata is the
same in each). Everything is integer bookkeeping in numpy; the layers turn it into gathers.

Vocabulary used below: a token's *predecessor* is the token before it on its request's path (the
previous token of its segment, or the parent segment's last token for a segment's first token, or none
at position 0). A *piece* is a maximal run of packed tokens of one segment owned by one rank; the
Gated DeltaNet recurrence runs piece by piece, each starting from the state after its predecessor.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, kw_only=True, eq=False)
class Pieces:
    """The wave's pieces in packed order. ``pred``: the piece whose last token precedes this piece's
    first token on its path (-1 for a root segment's first piece). ``round``: how many rank changes lie
    on the path before it (the pieces of one round only need states computed in earlier rounds or
    earlier on the same rank). ``depth``: position in its rank's chain of same-round pieces."""

    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray
    segment: np.ndarray
    pred: np.ndarray
    round: np.ndarray
    depth: np.ndarray

    @property
    def count(self) -> int:
        """Number of pieces."""
        return int(self.start.size)

    @cached_property
    def handoffs(self) -> tuple[np.ndarray, ...]:
        """Per round, the pieces whose final state a piece on another rank starts from, owner-major
        (the order in which the ranks' contributions are concatenated when states are exchanged)."""
        has_pred = self.pred >= 0
        crossing = np.zeros(self.count, dtype=bool)
        crossing[self.pred[has_pred][self.owner[has_pred] != self.owner[self.pred[has_pred]]]] = True
        out = []
        for r in range(int(self.round.max()) + 1 if self.count else 0):
            chosen = np.flatnonzero(crossing & (self.round == r))
            out.append(chosen[np.argsort(self.owner[chosen], kind="stable")])
        return tuple(out)

    def steps(self, rank: int, round_: int) -> list[np.ndarray]:
        """The rank's pieces of one round, grouped by depth: each group can run as one batch."""
        mine = np.flatnonzero((self.owner == rank) & (self.round == round_))
        return (
            [mine[self.depth[mine] == d] for d in range(int(self.depth[mine].max()) + 1)] if mine.size else []
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveGeometry:
    """Ownership and path structure of one wave. Arrays over packed tokens: ``owner``, ``local`` (row in
    the owner's local tensors), ``segment``, ``pred`` (predecessor token, -1 for none), ``input_ids``."""

    num_ranks: int
    owner: np.ndarray
    local: np.ndarray
    segment: np.ndarray
    pred: np.ndarray
    input_ids: np.ndarray
    seg_parent: np.ndarray
    seg_offset: np.ndarray
    seg_length: np.ndarray
    counts: tuple[int, ...]
    readback: tuple[np.ndarray, ...]
    requests: tuple[tuple[str, int], ...]

    @classmethod
    def build(cls, batches) -> WaveGeometry:
        """From every rank's batch of one wave (``cpplan.materialize_wave``)."""
        first = batches[0]
        owner = first.token_owner.numpy()
        segment = first.segment_ids.numpy()
        seg_parent, seg_offset = first.seg_parent.numpy(), first.seg_offset.numpy()
        seg_length = first.seg_length.numpy()
        local = np.zeros(owner.size, dtype=np.int64)
        input_ids = np.zeros(owner.size, dtype=np.int64)
        for b in batches:
            index = b.packed_index.numpy()
            local[index] = np.arange(index.size)
            input_ids[index] = b.input_ids.numpy()
        return cls(
            num_ranks=first.num_ranks,
            owner=owner,
            local=local,
            segment=segment,
            pred=predecessors(segment, seg_parent, seg_offset, seg_length),
            input_ids=input_ids,
            seg_parent=seg_parent,
            seg_offset=seg_offset,
            seg_length=seg_length,
            counts=tuple(int(c) for c in np.bincount(owner, minlength=first.num_ranks)),
            readback=tuple(first.readback(k).numpy() for k in range(first.num_requests)),
            requests=first.requests,
        )

    @property
    def packed_tokens(self) -> int:
        """Tokens in the wave's packed sequence."""
        return int(self.owner.size)

    def owned(self, rank: int) -> np.ndarray:
        """Packed positions the rank owns, in packed (= local row) order."""
        return np.flatnonzero(self.owner == rank)

    @cached_property
    def rank_major(self) -> np.ndarray:
        """Packed positions in the order of all ranks' local rows concatenated (rank 0's first)."""
        return np.argsort(self.owner, kind="stable")

    @cached_property
    def pieces(self) -> Pieces:
        """The wave's pieces and their schedule."""
        return pieces(self.segment, self.owner, self.pred)

    def history(self, taps: int) -> np.ndarray:
        """``(packed, taps)``: the path tokens at offsets ``taps-1 .. 0`` before each token (the token
        itself last), -1 before the path's start."""
        out = np.full((self.packed_tokens, taps), -1, dtype=np.int64)
        current = np.arange(self.packed_tokens)
        for j in range(taps - 1, -1, -1):
            out[:, j] = current
            current = np.where(current >= 0, self.pred[np.maximum(current, 0)], -1)
        return out

    def path_keys(self, segment: int, last: int) -> np.ndarray:
        """Packed positions a query at packed position ``last`` of ``segment`` may attend (its ancestor
        segments in full, root first, then its own segment up to ``last``)."""
        chain = []
        s = int(self.seg_parent[segment])
        while s >= 0:
            chain.append(s)
            s = int(self.seg_parent[s])
        ranges = [np.arange(self.seg_offset[s], self.seg_offset[s] + self.seg_length[s]) for s in chain[::-1]]
        ranges.append(np.arange(self.seg_offset[segment], last + 1))
        return np.concatenate(ranges)


def predecessors(
    segment: np.ndarray, seg_parent: np.ndarray, seg_offset: np.ndarray, seg_length: np.ndarray
) -> np.ndarray:
    """Each packed token's predecessor on its path, -1 at a root segment's first token."""
    pred = np.arange(segment.size, dtype=np.int64) - 1
    first = seg_offset[segment] == np.arange(segment.size)
    parent = seg_parent[segment[first]]
    parent_last = np.where(parent >= 0, seg_offset[parent] + seg_length[parent] - 1, -1)
    pred[first] = parent_last
    return pred


def pieces(segment: np.ndarray, owner: np.ndarray, pred: np.ndarray) -> Pieces:
    """Split the packed tokens into pieces and schedule them (see :class:`Pieces`)."""
    n = segment.size
    new = np.r_[True, (segment[1:] != segment[:-1]) | (owner[1:] != owner[:-1])] if n else np.zeros(0, bool)
    start = np.flatnonzero(new)
    end = np.r_[start[1:], n].astype(np.int64)
    piece_of = np.cumsum(new) - 1
    first_pred = pred[start]
    pred_piece = np.where(first_pred >= 0, piece_of[np.maximum(first_pred, 0)], -1)
    piece_owner = owner[start]
    round_ = np.zeros(start.size, dtype=np.int64)
    depth = np.zeros(start.size, dtype=np.int64)
    for i in range(start.size):  # predecessors come first in packed order
        p = pred_piece[i]
        if p < 0:
            continue
        if piece_owner[p] == piece_owner[i]:
            round_[i], depth[i] = round_[p], depth[p] + 1
        else:
            round_[i] = round_[p] + 1
    return Pieces(
        start=start,
        end=end,
        owner=piece_owner,
        segment=segment[start],
        pred=pred_piece,
        round=round_,
        depth=depth,
    )


__all__ = ["Pieces", "WaveGeometry", "pieces", "predecessors"]
