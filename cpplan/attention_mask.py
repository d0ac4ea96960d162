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
        """The mask of a :class:`~cpplan.materialize.RankBatch`: its owned queries (``queries="owned"``)
        or every packed token (``queries="all"``) against all keys of the wave."""
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

    def block_mask(self, *, block_size: int = 128, compile: bool = False) -> BlockMask:
        """A flex_attention BlockMask (batch and heads broadcast). Raises ``RuntimeError`` when the
        installed torch has no flex_attention."""
        if not flex_attention_available():
            raise RuntimeError("this torch has no torch.nn.attention.flex_attention")
        return create_block_mask(
            self.mask_mod(),
            None,
            None,
            self.num_queries,
            self.num_keys,
            device="cpu",
            BLOCK_SIZE=block_size,
            _compile=compile,
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
