"""Which packed tokens' logits a wave needs, when requests carry loss masks, as spans.

A request needs the logits at the positions :meth:`~cpplan.spec.workload.Request.logits_needed` sets;
a packed token copy needs them when some request through it does. Without masks a request needs all
of its positions or none, so a segment's flag (``PackedLayout.seg_loss``: some request through it
needs logits) is exact and the closed-form span amounts (:mod:`cpplan.pricing.amounts`) count the
``only = "loss"`` quantities with no per-request data at all: that path is unchanged.

With masks, :class:`LossPositions` holds each request's needed positions as runs (``[start, end)`` of
consecutive needed positions: a completion-only mask is one run). A packed layout then carries its
``loss_spans``: the disjoint runs of packed tokens whose logits are needed, each inside one segment,
found by intersecting every request's runs with the segments of its chain and merging them per
segment. Every span is ``n`` tokens at consecutive positions, so the ``loss`` columns are the same
closed form as any other span: no per-token arrays, and the work grows with segments times runs,
not with tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.pricing.amounts import SPAN_RULES
from cpplan.pricing.layout import LossSpans, PackedLayout, chain_positions
from cpplan.pricing.tree import PrefixTree
from cpplan.spec.quantities import ADDITIVE, QUANTITY_INDEX
from cpplan.spec.workload import Request

LOSS_COLUMNS = tuple((QUANTITY_INDEX[q.name], q.count) for q in ADDITIVE if q.only == "loss")
"""``(column, count)`` of every additive quantity restricted to tokens whose logits are needed."""


@dataclass(frozen=True, kw_only=True, eq=False)
class LossPositions:
    """Every request's needed positions as runs, flattened in request order: request ``r``'s runs are
    ``[run_start[i], run_end[i])`` for ``i`` in ``run_ptr[r]:run_ptr[r + 1]``, ascending."""

    run_start: np.ndarray
    run_end: np.ndarray
    run_ptr: np.ndarray

    @classmethod
    def of(cls, requests: Sequence[Request]) -> LossPositions | None:
        """The needed positions of ``requests``, or ``None`` when no loss request has a mask (each then
        needs all of its positions or none, and the per-segment flag is exact)."""
        if not any(r.output == "loss" and r.loss_mask is not None for r in requests):
            return None
        starts, ends, counts = [], [], []
        for request in requests:
            edges = np.flatnonzero(np.diff(np.concatenate([[0], request.logits_needed().view(np.int8), [0]])))
            starts.append(edges[0::2]), ends.append(edges[1::2]), counts.append(edges.size // 2)
        return cls(
            run_start=np.concatenate(starts).astype(np.int64),
            run_end=np.concatenate(ends).astype(np.int64),
            run_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        )


def needed_spans(
    segments: tuple[np.ndarray, np.ndarray, np.ndarray],
    chains: tuple[np.ndarray, np.ndarray, np.ndarray],
    positions: LossPositions,
) -> LossSpans:
    """The disjoint runs of needed tokens of a packing. ``segments``: ``(offset, position, length)`` of
    each segment (laid end to end in offset order); ``chains``: ``(requests, ptr, segments)``, request
    ``requests[k]``'s chain being ``segments[ptr[k]:ptr[k + 1]]``. Each request's runs are cut to the
    segments of its chain; the pieces are merged per segment."""
    seg_offset, seg_position, seg_length = segments
    requests, ptr, chain = chains
    entry_request = np.repeat(np.asarray(requests, dtype=np.int64), np.diff(ptr))
    num_runs = np.diff(positions.run_ptr)[entry_request]
    entry = np.repeat(np.arange(entry_request.size), num_runs)
    run = chain_positions(positions.run_ptr[entry_request], num_runs, np.arange(entry_request.size))
    seg = chain[entry]
    low = np.maximum(positions.run_start[run], seg_position[seg])
    high = np.minimum(positions.run_end[run], seg_position[seg] + seg_length[seg])
    keep = low < high
    seg, low, high = seg[keep], low[keep], high[keep]
    start = seg_offset[seg] + low - seg_position[seg]
    order = np.lexsort((high, start))
    return _merged(start[order], (start + high - low)[order], seg[order], seg_offset, seg_position)


def _merged(
    start: np.ndarray, end: np.ndarray, seg: np.ndarray, seg_offset: np.ndarray, seg_position: np.ndarray
) -> LossSpans:
    """Pieces sorted by start, merged where they overlap or touch inside one segment."""
    if start.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return LossSpans(start=empty, length=empty, position=empty, segment=empty)
    reach = np.maximum.accumulate(end)
    new = np.concatenate([[True], (start[1:] > reach[:-1]) | (seg[1:] != seg[:-1])])
    firsts = np.flatnonzero(new)
    merged_start, merged_seg = start[firsts], seg[firsts]
    return LossSpans(
        start=merged_start,
        length=np.maximum.reduceat(end, firsts) - merged_start,
        position=merged_start - seg_offset[merged_seg] + seg_position[merged_seg],
        segment=merged_seg,
    )


def with_loss_spans(layout: PackedLayout, positions: LossPositions | None) -> PackedLayout:
    """``layout`` carrying its needed spans (unchanged when ``positions`` is ``None``)."""
    if positions is None:
        return layout
    segments = (layout.seg_offset, layout.seg_position, layout.seg_length)
    chains = (layout.request_ids, layout.request_ptr, layout.request_segments)
    return dataclasses.replace(layout, loss_spans=needed_spans(segments, chains, positions))


def _span_values(count: str, spans: LossSpans) -> np.ndarray:
    """Each span's amount of a ``count`` quantity."""
    return SPAN_RULES[count](spans.length, spans.position)


def set_loss_prefix(cumulative: np.ndarray, bounds: np.ndarray, layout: PackedLayout) -> None:
    """Overwrite the loss columns of ``cumulative`` (the amounts of the tokens before each of the
    ascending ``bounds``) from ``layout.loss_spans``: the whole spans before each bound plus the first
    tokens of the last span starting before it."""
    spans = layout.loss_spans
    assert spans is not None
    if spans.start.size == 0:
        for column, _ in LOSS_COLUMNS:
            cumulative[:, column] = 0
        return
    last = np.searchsorted(spans.start, bounds, side="right") - 1
    some = last >= 0
    last = np.maximum(last, 0)
    inside = np.where(some, np.clip(bounds - spans.start[last], 0, spans.length[last]), 0)
    for column, count in LOSS_COLUMNS:
        whole = np.concatenate([[0], np.cumsum(_span_values(count, spans))])
        cumulative[:, column] = np.where(
            some, whole[last] + SPAN_RULES[count](inside, spans.position[last]), 0
        )


def layout_totals(amounts: np.ndarray, layout: PackedLayout) -> np.ndarray:
    """``amounts`` (a layout's closed-form totals, one per quantity) with its loss columns recounted
    from ``layout.loss_spans`` when the layout has them."""
    if layout.loss_spans is None:
        return amounts
    amounts = amounts.copy()
    for column, count in LOSS_COLUMNS:
        amounts[column] = int(_span_values(count, layout.loss_spans).sum())
    return amounts


def set_node_loss(amounts: np.ndarray, tree: PrefixTree, positions: LossPositions) -> None:
    """Overwrite the loss columns of per-node ``amounts`` (one copy of each prefix-tree node): the
    node's positions needed by any request through it (an upper bound for every copy of the node)."""
    offsets = np.concatenate([[0], np.cumsum(tree.node_length)[:-1]]).astype(np.int64)
    requests = np.arange(tree.num_requests, dtype=np.int64)
    spans = needed_spans(
        (offsets, tree.node_start, tree.node_length), (requests, tree.path_ptr, tree.path_nodes), positions
    )
    for column, count in LOSS_COLUMNS:
        per_node = np.zeros(tree.num_nodes, dtype=np.int64)
        np.add.at(per_node, spans.segment, _span_values(count, spans))
        amounts[:, column] = per_node
