"""Index plans for one wave, shared by every layer: who owns what, what each rank must receive.

Built once per wave from the :class:`~cpplan.RankBatch` of every CP rank, reading only their fields:
the owned tokens, the whole-wave segment metadata and the kernel fields (pieces, key paths, state
sources; :mod:`cpplan.runtime.kernel_fields` derives them, nothing here derives them again).
Everything is integer bookkeeping in numpy; the layers turn it into gathers.

A *piece* is a maximal run of packed tokens of one segment owned by one rank; the Gated DeltaNet
recurrence runs piece by piece, each starting from the final state of its state-source piece.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, kw_only=True, eq=False)
class Pieces:
    """The wave's pieces in packed order. ``pred``: the piece whose final state this piece starts from
    (the batches' state source; -1 for a zero state). ``round``: how many rank changes lie on the path
    before it (the pieces of one round only need states computed in earlier rounds or earlier on the
    same rank). ``depth``: position in its rank's chain of same-round pieces. ``slot``: the piece's index
    among its owner's pieces (its row in the owner's kernel fields)."""

    start: np.ndarray
    end: np.ndarray
    owner: np.ndarray
    segment: np.ndarray
    pred: np.ndarray
    round: np.ndarray
    depth: np.ndarray
    slot: np.ndarray

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
class RankKeys:
    """One rank's kernel fields as numpy: its pieces' local rows ``rows_cu`` (``piece_cu_seqlens``) and
    their key paths ``keys[keys_cu[i]:keys_cu[i + 1]]`` (``attn_k_index``, ``attn_k_cu_seqlens``)."""

    rows_cu: np.ndarray
    keys: np.ndarray
    keys_cu: np.ndarray

    @classmethod
    def of(cls, batch) -> RankKeys:
        """From a :class:`~cpplan.RankBatch`."""
        return cls(
            rows_cu=batch.piece_cu_seqlens.numpy().astype(np.int64),
            keys=batch.attn_k_index.numpy(),
            keys_cu=batch.attn_k_cu_seqlens.numpy().astype(np.int64),
        )

    @property
    def num_pieces(self) -> int:
        """Pieces of the rank."""
        return int(self.rows_cu.size - 1)

    def history(self, taps: int) -> np.ndarray:
        """``(owned tokens, taps)``: the path tokens at offsets ``taps-1 .. 0`` before each owned token
        (the token itself last), -1 before the path's start. The piece's queries are the last keys of
        its path, so an owned token's taps are the keys ending at its own."""
        lengths = np.diff(self.rows_cu)
        piece = np.repeat(np.arange(self.num_pieces), lengths)
        row_in_piece = np.arange(int(self.rows_cu[-1])) - self.rows_cu[piece]
        at = self.keys_cu[piece + 1] - lengths[piece] + row_in_piece  # the token's own key
        taps_at = at[:, None] - np.arange(taps - 1, -1, -1)[None, :]
        valid = taps_at >= self.keys_cu[piece][:, None]
        return np.where(valid, self.keys[np.where(valid, taps_at, 0)], -1)


@dataclass(frozen=True, kw_only=True, eq=False)
class WaveGeometry:
    """Ownership and path structure of one wave. Arrays over packed tokens: ``owner``, ``local`` (row in
    the owner's local tensors), ``segment``, ``input_ids``; ``keys[r]``: rank ``r``'s pieces and key
    paths."""

    num_ranks: int
    owner: np.ndarray
    local: np.ndarray
    segment: np.ndarray
    input_ids: np.ndarray
    seg_parent: np.ndarray
    seg_offset: np.ndarray
    seg_length: np.ndarray
    counts: tuple[int, ...]
    readback: tuple[np.ndarray, ...]
    requests: tuple[tuple[str, int], ...]
    keys: tuple[RankKeys, ...]
    pieces: Pieces

    @classmethod
    def build(cls, batches) -> WaveGeometry:
        """From every rank's batch of one wave (``cpplan.materialize_wave``)."""
        first = batches[0]
        owner = first.token_owner.numpy()
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
            segment=first.segment_ids.numpy(),
            input_ids=input_ids,
            seg_parent=first.seg_parent.numpy(),
            seg_offset=first.seg_offset.numpy(),
            seg_length=first.seg_length.numpy(),
            counts=tuple(int(c) for c in np.bincount(owner, minlength=first.num_ranks)),
            readback=tuple(first.readback(k).numpy() for k in range(first.num_requests)),
            requests=first.requests,
            keys=tuple(RankKeys.of(b) for b in batches),
            pieces=pieces_of(batches),
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

    def history(self, taps: int) -> np.ndarray:
        """``(packed, taps)``: the path tokens at offsets ``taps-1 .. 0`` before each token (the token
        itself last), -1 before the path's start (read from every rank's key paths)."""
        out = np.full((self.packed_tokens, taps), -1, dtype=np.int64)
        for r, keys in enumerate(self.keys):
            out[self.owned(r)] = keys.history(taps)
        return out

    def piece_keys(self, rank: int, piece: int) -> np.ndarray:
        """Packed positions the queries of the rank's ``piece`` may attend (its key path)."""
        keys = self.keys[rank]
        return keys.keys[keys.keys_cu[piece] : keys.keys_cu[piece + 1]]


def pieces_of(batches) -> Pieces:
    """Every rank's pieces, in packed order, with their state sources and schedule (see
    :class:`Pieces`)."""
    start, end, owner, segment, slot, source = [], [], [], [], [], []
    for b in batches:
        index, cu = b.packed_index.numpy(), b.piece_cu_seqlens.numpy().astype(np.int64)
        start.append(index[cu[:-1]])
        end.append(index[cu[1:] - 1] + 1 if cu.size > 1 else cu[:0])
        owner.append(np.full(cu.size - 1, b.rank, dtype=np.int64))
        segment.append(b.piece_segment.numpy())
        slot.append(np.arange(cu.size - 1))
        source.append(np.stack([b.state_source_rank.numpy(), b.state_source_piece.numpy()]))
    base = np.r_[0, np.cumsum([b.num_pieces for b in batches])]
    start, end, owner, segment, slot = (np.concatenate(x) for x in (start, end, owner, segment, slot))
    source_rank, source_piece = np.concatenate(source, axis=1)
    order = np.argsort(start, kind="stable")
    position = np.empty(order.size, dtype=np.int64)
    position[order] = np.arange(order.size)
    pred = np.where(source_rank >= 0, position[base[np.maximum(source_rank, 0)] + source_piece], -1)
    start, end, owner, segment, slot, pred = (x[order] for x in (start, end, owner, segment, slot, pred))
    round_, depth = _schedule(owner, pred)
    return Pieces(
        start=start, end=end, owner=owner, segment=segment, pred=pred, round=round_, depth=depth, slot=slot
    )


def _schedule(owner: np.ndarray, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each piece's round and depth (see :class:`Pieces`); a piece's source precedes it in packed order."""
    round_ = np.zeros(owner.size, dtype=np.int64)
    depth = np.zeros(owner.size, dtype=np.int64)
    for i in range(owner.size):
        p = pred[i]
        if p < 0:
            continue
        assert p < i, "a piece's state source must precede it"
        if owner[p] == owner[i]:
            round_[i], depth[i] = round_[p], depth[p] + 1
        else:
            round_[i] = round_[p] + 1
    return round_, depth


__all__ = ["Pieces", "RankKeys", "WaveGeometry", "pieces_of"]
