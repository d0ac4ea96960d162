"""The price of head-parallel GDN (``gdn_handoff = "head_parallel"``): two all-to-alls, no state crosses.

As :mod:`cpplan.hf.gdn_heads` executes it, per GDN layer and pass (forward, recompute, backward) every
rank sends each other rank its owned tokens' rows of that rank's heads and receives every other rank's
rows of its own heads, runs the whole wave's recurrence for its ``1 / cp`` of the heads, and an
all-to-all of the outputs goes back. No rank waits for another's state, so nothing of the rounds or the
parallel passing is paid; instead, with ``T_r`` rank ``r``'s owned tokens and ``P`` the wave's packed
tokens, each all-to-all moves, on its busiest rank, ``max_r max(T_r (cp - 1) / cp, (P - T_r) / cp)``
token rows (sent or received) at the row's full width, priced by the card's
``head_parallel_seconds_per_token`` (both all-to-alls, every pass and GDN layer), plus their latency
(``head_parallel_collective_seconds``) and, per prefix-tree level beyond the first, one more serial
recurrence call (``head_parallel_level_seconds``: a child segment starts from its parent's final state,
so the levels run one after another).

The recurrence itself stays in the per-rank terms, which count each rank's own ``T_r`` tokens of it:
head-parallel runs ``P / cp`` token-equivalents on every rank (``P`` tokens at ``1 / cp`` of the heads),
at most the busiest rank's ``T_r``, so the per-rank price is never below what runs (on a wave balanced
by tokens it is exact). The card offers the mode only where its value heads divide over the CP ranks
(``head_parallel_when``); elsewhere :func:`head_parallel_price` returns ``None``.
"""

from __future__ import annotations

import numpy as np

from cpplan.spec.card import HandoffSeconds


def owned_tokens(owner: np.ndarray, chunk_tokens: int, packed_tokens: int, num_ranks: int) -> np.ndarray:
    """Each rank's owned packed tokens under a chunk ownership (the last chunk may be partial)."""
    owner = np.asarray(owner, dtype=np.int64)
    sizes = np.minimum(chunk_tokens, packed_tokens - np.arange(owner.size) * chunk_tokens)
    return np.bincount(owner, weights=sizes, minlength=num_ranks).astype(np.int64)


def moved_rows(tokens: np.ndarray) -> float:
    """Token rows the busiest rank sends or receives in one all-to-all from token shards to head shards
    (or back): ``max_r max(T_r (cp - 1) / cp, (P - T_r) / cp)``."""
    cp = tokens.size
    total = float(tokens.sum())
    return float(np.maximum(tokens * (cp - 1) / cp, (total - tokens) / cp).max())


def tree_levels(seg_parent: np.ndarray) -> int:
    """Levels of a packed layout's prefix tree (segments in packed order, parents first): 1 for roots
    only, 0 for no segment."""
    depth = np.zeros(seg_parent.size, dtype=np.int64)
    for s, parent in enumerate(np.asarray(seg_parent).tolist()):
        if parent >= 0:
            depth[s] = depth[parent] + 1
    return int(depth.max()) + 1 if depth.size else 0


def head_parallel_price(
    layout,
    owner: np.ndarray,
    chunk_tokens: int,
    num_ranks: int,
    seconds: HandoffSeconds,
    *,
    levels: int | None = None,
) -> tuple[float, int, float] | None:
    """A packed layout's GDN layers run head-parallel under a chunk ownership: the rows its busiest rank
    moves per all-to-all, its tree levels (``levels`` when known) and the seconds they cost; ``None``
    where the card does not offer the mode (or at one rank).
    :func:`cpplan.pricing.handoff.head_parallel_handoff` wraps it."""
    if num_ranks == 1 or not seconds.head_parallel_priced:
        return None
    tokens = owned_tokens(owner, chunk_tokens, layout.packed_tokens, num_ranks)
    moved = moved_rows(tokens)
    levels = tree_levels(layout.seg_parent) if levels is None else levels
    cost = (
        seconds.head_collective_s
        + moved * seconds.head_s_per_token
        + max(levels - 1, 0) * seconds.head_level_s
    )
    return moved, levels, float(cost)


__all__ = ["head_parallel_price", "moved_rows", "owned_tokens", "tree_levels"]
