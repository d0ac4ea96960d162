"""Whole-request ownership: every rank owns whole root subtrees of a wave's prefix tree, so no segment
crosses ranks (no GDN state handed over, no piece split) and ranks are balanced by bin packing.

A root subtree's segments may not end on a chunk boundary: in a wave's packed order, a chunk holding
tokens of two root subtrees joins them, and what must sit on one rank is a *group*, the root subtrees
joined so (:func:`chunk_groups`). Reordering the wave's items instead makes *units* (root subtrees
joined by items, :func:`segment_units`) whose blocks can be laid out rank after rank. Groups and units
are packed onto ranks by :mod:`cpplan.pricing.rank_exchanges`, from the loads given here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cpplan.pricing.amounts import SPAN_RULES, span_amounts
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.loss_positions import LOSS_COLUMNS
from cpplan.pricing.ownership import ChunkStats
from cpplan.pricing.problem import Problem
from cpplan.pricing.rank_exchanges import GroupLoads
from cpplan.pricing.union_find import UnionFind
from cpplan.spec.quantities import QUANTITIES, QUANTITY_INDEX, SEGMENT_COLUMNS

_REMOTE = np.array([QUANTITY_INDEX[q.name] for q in QUANTITIES if q.count == "remote"])
_SEGMENTS = np.array(SEGMENT_COLUMNS)


def segment_roots(layout: PackedLayout) -> np.ndarray:
    """Per segment, the root segment of its subtree in the packed layout."""
    parent = layout.seg_parent.tolist()
    root = list(range(layout.num_segments))
    for s, up in enumerate(parent):  # parents come before their children
        if up >= 0:
            root[s] = root[up]
    return np.array(root, dtype=np.int64)


def _numbered(labels: np.ndarray) -> np.ndarray:
    """``labels`` renumbered ``0, 1, ...`` in the order of their first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank_of_label = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    return rank_of_label[inverse.reshape(-1)].astype(np.int64)


def chunk_groups(layout: PackedLayout, stats: ChunkStats) -> np.ndarray:
    """Per chunk, its group: root subtrees of the layout joined where a chunk holds tokens of both,
    numbered in the order of their first chunk. A rank owning a group's chunks owns its segments whole."""
    root = segment_roots(layout)
    joined = UnionFind(layout.num_segments)
    chunk_tokens = stats.chunk_tokens
    for s in np.flatnonzero(layout.seg_offset[1:] % chunk_tokens != 0).tolist():
        joined.union(int(root[s]), int(root[s + 1]))  # a chunk holds the end of s and the start of s + 1
    roots, at = np.unique(root[stats.first_segment], return_inverse=True)
    return _numbered(np.array([joined.find(r) for r in roots.tolist()], dtype=np.int64)[at.reshape(-1)])


def segment_units(layout: PackedLayout, num_requests: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Units of the layout's items (``num_requests``: each item's requests, in packed order): root
    subtrees joined where one item's requests reach more than one, numbered in order of first use.
    Returns each item's unit and each segment's unit; a unit's segments are its items' alone."""
    root = segment_roots(layout)
    request_root = root[layout.request_segments[layout.request_ptr[:-1]]].tolist()
    joined = UnionFind(layout.num_segments)
    start = 0
    for n in num_requests:
        for r in request_root[start + 1 : start + n]:
            joined.union(request_root[start], r)
        start += n
    label = np.array([joined.find(int(r)) for r in root.tolist()], dtype=np.int64)
    item_first = np.cumsum([0, *num_requests])[:-1]
    numbered = _numbered(np.concatenate([label[np.asarray(request_root, dtype=np.int64)[item_first]], label]))
    return numbered[: len(num_requests)], numbered[len(num_requests) :]


def group_loads(problem: Problem, per_group: np.ndarray, packed_tokens: int) -> GroupLoads:
    """The :class:`GroupLoads` of groups whose local quantities are ``per_group`` (a remote count's
    column holding minus the group's tokens: a rank's remote count is the wave's ``packed_tokens`` less
    its own), under ``problem``'s card and budget."""
    card = problem.card
    envelopes = card.envelope_coefficients()
    baseline = card.envelope_static_bytes + packed_tokens * envelopes[:, _REMOTE].sum(axis=1)
    return GroupLoads(
        barrier_s=per_group @ card.constants.barrier_coefficients.T,
        bytes=per_group @ envelopes.T,
        room_bytes=problem.memory_bytes / card.safety - baseline,
    )


def chunk_group_quantities(stats: ChunkStats, matrix: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group of :func:`chunk_groups`, its local quantities for :func:`group_loads` (``matrix``: the
    chunks' :meth:`~cpplan.pricing.ownership.ChunkStats.quantity_matrix`): its chunks' sums, less the
    shared edges inside it in each segment column (a group holds both chunks of every shared edge)."""
    per_chunk = matrix.copy()
    per_chunk[:, _SEGMENTS] -= stats.shared_edges[:, None]
    per_chunk[:, _REMOTE] = -stats.tokens[:, None]
    per_group = np.zeros((int(groups.max()) + 1, per_chunk.shape[1]))
    np.add.at(per_group, groups, per_chunk)
    return per_group


def unit_quantities(layout: PackedLayout, segment_unit: np.ndarray) -> np.ndarray:
    """Per unit of :func:`segment_units`, its local quantities for :func:`group_loads` when a rank owns
    it whole: its segments' amounts, one piece per segment, and under loss masks the loss columns of
    the needed spans inside its segments (``layout.loss_spans``), as the exact price counts them."""
    flags = {"grad": layout.seg_grad, "loss": layout.seg_loss}
    per_segment = span_amounts(layout.seg_length, layout.seg_position, flags).astype(np.float64)
    per_segment[:, _SEGMENTS] = 1.0
    per_segment[:, _REMOTE] = -layout.seg_length[:, None]
    per_unit = np.zeros((int(segment_unit.max()) + 1, per_segment.shape[1]))
    np.add.at(per_unit, segment_unit, per_segment)
    spans = layout.loss_spans
    if spans is not None:
        span_unit = segment_unit[spans.segment]
        for column, count in LOSS_COLUMNS:
            amounts = SPAN_RULES[count](spans.length, spans.position).astype(np.float64)
            per_unit[:, column] = np.bincount(span_unit, weights=amounts, minlength=per_unit.shape[0])
    return per_unit
