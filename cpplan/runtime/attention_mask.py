"""Tree attention masks from a wave's segment metadata: dense boolean, and flex_attention BlockMask.

Query ``q`` (a packed position) may attend key ``k`` exactly when ``k <= q`` and the segment of ``k`` is
the segment of ``q`` or one of its ancestors. Segments are laid out parents before children, so a key in
an ancestor segment always precedes the query and the single test ``k <= q`` covers both the causal
order inside a segment and the full view of ancestors.

The ancestor test is a table lookup: ``ancestors[s, d]`` is the ancestor of segment ``s`` at depth
``d`` (``s`` itself at its own depth, -1 below the root or past ``s``'s depth), so segment ``t`` is
an ancestor-or-self of ``s`` iff ``ancestors[s, depth[t]] == t``. The table is ``segments × (max depth
+ 1)`` integers, built in ``max depth`` vectorized steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

try:  # flex_attention appeared in torch 2.5
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask
except ImportError:  # pragma: no cover - depends on the installed torch
    BlockMask = None
    create_block_mask = None

DENSE_ROWS_PER_STEP = 1024


def flex_attention_available() -> bool:
    """Whether the installed torch has ``torch.nn.attention.flex_attention``."""
    return create_block_mask is not None


def segment_depths(seg_parent: torch.Tensor) -> torch.Tensor:
    """Depth of every segment (a root segment has depth 0)."""
    seg_parent = torch.as_tensor(seg_parent, dtype=torch.int64)
    num_segments = seg_parent.numel()
    assert bool((seg_parent < torch.arange(num_segments)).all()), "a segment's parent must precede it"
    depth = torch.zeros(num_segments, dtype=torch.int64)
    cursor = seg_parent.clone()
    while bool((cursor >= 0).any()):
        alive = cursor >= 0
        depth += alive.to(torch.int64)
        cursor = torch.where(alive, seg_parent[cursor.clamp(min=0)], cursor)
    return depth


def ancestor_table(seg_parent: torch.Tensor, depth: torch.Tensor | None = None) -> torch.Tensor:
    """``table[s, d]``: the ancestor of segment ``s`` at depth ``d`` (itself at its own depth), else -1."""
    seg_parent = torch.as_tensor(seg_parent, dtype=torch.int64)
    depth = segment_depths(seg_parent) if depth is None else depth
    num_segments = seg_parent.numel()
    max_depth = int(depth.max()) if num_segments else 0
    table = torch.full((num_segments, max_depth + 1), -1, dtype=torch.int64)
    rows = torch.arange(num_segments)
    cursor = rows.clone()
    while bool((cursor >= 0).any()):
        alive = cursor >= 0
        table[rows[alive], depth[cursor[alive]]] = cursor[alive]
        cursor = torch.where(alive, seg_parent[cursor.clamp(min=0)], cursor)
    return table


@dataclass(frozen=True, kw_only=True, eq=False)
class TreeMask:
    """The tree attention mask of one wave, for a set of queries against every packed key.

    ``segment_ids``: segment of every packed token (the keys). ``query_index``: packed positions of the
    queries (all tokens for an unsharded run, a rank's owned tokens under CP).
    """

    segment_ids: torch.Tensor
    query_index: torch.Tensor
    depth: torch.Tensor
    ancestors: torch.Tensor

    @classmethod
    def build(
        cls, segment_ids: torch.Tensor, seg_parent: torch.Tensor, query_index: torch.Tensor | None = None
    ) -> TreeMask:
        """The mask for ``query_index`` (default: every packed position) against all keys."""
        segment_ids = torch.as_tensor(segment_ids, dtype=torch.int64)
        if query_index is None:
            query_index = torch.arange(segment_ids.numel(), dtype=torch.int64)
        depth = segment_depths(seg_parent)
        return cls(
            segment_ids=segment_ids,
            query_index=torch.as_tensor(query_index, dtype=torch.int64),
            depth=depth,
            ancestors=ancestor_table(seg_parent, depth),
        )

    @classmethod
    def for_batch(cls, batch, *, queries: str = "owned") -> TreeMask:
        """The mask of a :class:`~cpplan.runtime.materialize.RankBatch`: its owned queries
        (``queries="owned"``) or every packed token (``queries="all"``) against all keys of the wave."""
        if queries not in ("owned", "all"):
            raise ValueError(f"queries must be 'owned' or 'all', got {queries!r}")
        index = batch.packed_index if queries == "owned" else None
        return cls.build(batch.segment_ids, batch.seg_parent, index)

    @property
    def num_queries(self) -> int:
        """Rows of the mask."""
        return int(self.query_index.numel())

    @property
    def num_keys(self) -> int:
        """Columns of the mask (the wave's packed tokens)."""
        return int(self.segment_ids.numel())

    def allowed(self, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        """Whether query row ``q_idx`` may attend packed key ``kv_idx`` (broadcasting)."""
        q_pos = self.query_index[q_idx]
        q_seg = self.segment_ids[q_pos]
        k_seg = self.segment_ids[kv_idx]
        width = self.ancestors.shape[1]
        ancestor = self.ancestors.reshape(-1)[q_seg * width + self.depth[k_seg]]
        return (ancestor == k_seg) & (kv_idx <= q_pos)

    def dense(self) -> torch.Tensor:
        """The ``(num_queries, num_keys)`` boolean mask (for small waves: it is quadratic)."""
        keys = torch.arange(self.num_keys, dtype=torch.int64)[None, :]
        rows = [
            self.allowed(torch.arange(lo, min(lo + DENSE_ROWS_PER_STEP, self.num_queries))[:, None], keys)
            for lo in range(0, self.num_queries, DENSE_ROWS_PER_STEP)
        ]
        return torch.cat(rows) if rows else torch.zeros((0, self.num_keys), dtype=torch.bool)

    def mask_mod(self):
        """A flex_attention ``mask_mod(b, h, q_idx, kv_idx)`` reading this mask's metadata."""

        def mask_mod(b, h, q_idx, kv_idx):
            return self.allowed(q_idx, kv_idx)

        return mask_mod

    def block_mask(self, *, block_size: int = 128) -> BlockMask:
        """A flex_attention BlockMask (batch and heads broadcast) built from the segment intervals
        directly, without evaluating the mask token by token, so it scales to long waves: per query
        block, the key blocks it may touch and those every one of its queries sees entirely ("full");
        ``mask_mod`` decides inside the partial ones. Raises ``RuntimeError`` when the installed torch
        has no flex_attention."""
        if not flex_attention_available():
            raise RuntimeError("this torch has no torch.nn.attention.flex_attention")
        touched, full = self.block_structure(block_size)
        partial = touched & ~full

        def blocks(marks: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
            counts = marks.sum(axis=1).astype(np.int32)
            indices = np.argsort(~marks, axis=1, kind="stable").astype(np.int32)
            return torch.from_numpy(counts)[None, None], torch.from_numpy(np.ascontiguousarray(indices))[
                None, None
            ]

        kv_num, kv_indices = blocks(partial)
        full_num, full_indices = blocks(full)
        q_num, q_indices = blocks(partial.T)  # the transposed lists drive the backward pass
        full_q_num, full_q_indices = blocks(full.T)
        return BlockMask(
            seq_lengths=(self.num_queries, self.num_keys),
            kv_num_blocks=kv_num,
            kv_indices=kv_indices,
            full_kv_num_blocks=full_num,
            full_kv_indices=full_indices,
            q_num_blocks=q_num,
            q_indices=q_indices,
            full_q_num_blocks=full_q_num,
            full_q_indices=full_q_indices,
            BLOCK_SIZE=(block_size, block_size),
            mask_mod=self.mask_mod(),
        )

    def block_structure(self, block_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Boolean ``(query blocks, key blocks)`` matrices: blocks holding any allowed pair, and blocks
        whose every pair is allowed (a block running past the last query or key is never full).

        A query ``q`` of segment ``s`` sees the intervals of ``s``'s strict ancestors and ``[offset_s,
        q]``. A query block sees the union of its queries' intervals; every query of it sees the
        ancestors common to all its segments (a common ancestor that is itself one of the block's
        segments only up to its first query there).
        """
        seg = self.segment_ids.numpy()
        queries = self.query_index.numpy()
        depth = self.depth.numpy()
        table = self.ancestors.numpy()
        starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]]) if seg.size else np.zeros(0, np.int64)
        ends = np.r_[starts[1:], seg.size]
        assert starts.size == depth.size, "segment_ids must list the segments in packed order"
        num_q_blocks = -(-queries.size // block_size)
        num_k_blocks = -(-seg.size // block_size)
        touched = np.zeros((num_q_blocks, num_k_blocks + 1), dtype=np.int64)
        full = np.zeros((num_q_blocks, num_k_blocks + 1), dtype=np.int64)
        for i in range(num_q_blocks):
            block = queries[i * block_size : (i + 1) * block_size]
            segs, first = np.unique(seg[block], return_index=True)
            last = np.r_[first[1:], block.size] - 1
            # Union: every strict ancestor in full, each own segment up to its last query.
            anc = np.concatenate([table[s, : depth[s]] for s in segs.tolist()])
            lo = np.r_[starts[anc], starts[segs]]
            hi = np.r_[ends[anc], block[last] + 1]
            np.add.at(touched[i], lo // block_size, 1)
            np.add.at(touched[i], (hi - 1) // block_size + 1, -1)
            if block.size < block_size:
                continue
            # Intersection: ancestors shared by all the block's segments.
            rows = table[segs]
            shared = int(np.argmin(np.r_[(rows == rows[:1]).all(axis=0) & (rows[0] >= 0), False]))
            common = rows[0, :shared]
            lo = starts[common]
            hi = ends[common].copy()
            own = np.searchsorted(segs, common)
            mine = (own < segs.size) & (segs[np.minimum(own, segs.size - 1)] == common)
            hi[mine] = block[first[own[mine]]] + 1
            # Merge touching intervals, then mark the key blocks each covers whole.
            if lo.size:
                breaks = np.r_[True, lo[1:] != hi[:-1]]
                lo, hi = lo[breaks], np.r_[hi[:-1][breaks[1:]], hi[-1]]
                first_block, end_block = -(-lo // block_size), hi // block_size
                keep = first_block < end_block
                np.add.at(full[i], first_block[keep], 1)
                np.add.at(full[i], end_block[keep], -1)
        touched = np.cumsum(touched, axis=1)[:, :num_k_blocks] > 0
        full = np.cumsum(full, axis=1)[:, :num_k_blocks] > 0
        return touched, full

    def block_mask_from_mask_mod(self, *, block_size: int = 128) -> BlockMask:
        """The BlockMask torch derives by evaluating ``mask_mod`` on every pair (``create_block_mask``):
        quadratic in memory, an independent check of :meth:`block_mask` on small waves."""
        if not flex_attention_available():
            raise RuntimeError("this torch has no torch.nn.attention.flex_attention")
        return create_block_mask(
            self.mask_mod(), None, None, self.num_queries, self.num_keys, device="cpu", BLOCK_SIZE=block_size
        )


def tree_mask(
    segment_ids: torch.Tensor, seg_parent: torch.Tensor, query_index: torch.Tensor | None = None
) -> torch.Tensor:
    """The dense boolean tree mask of ``query_index`` (default: all) against every packed key."""
    return TreeMask.build(segment_ids, seg_parent, query_index).dense()


__all__ = [
    "TreeMask",
    "ancestor_table",
    "flex_attention_available",
    "segment_depths",
    "tree_mask",
]
