"""Which packed tokens' logits a wave needs, when requests carry loss masks.

A request needs the logits at the positions :meth:`~cpplan.spec.workload.Request.logits_needed` sets;
a packed token copy needs them when some request through it does. Without masks a request needs all
of its positions or none, so a segment's flag (``PackedLayout.seg_loss``: some request through it
needs logits) is exact and the closed-form span amounts (:mod:`cpplan.pricing.amounts`) count the
``only = "loss"`` quantities with no per-token array. With masks, :class:`LossPositions` holds every
request's needed positions, each packed layout carries its per-token ``token_loss`` and the ``loss``
columns are summed from it; everything else keeps its closed form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.pricing.amounts import SPAN_RULES
from cpplan.pricing.layout import PackedLayout, chain_positions
from cpplan.pricing.tree import PrefixTree
from cpplan.spec.quantities import ADDITIVE, QUANTITY_INDEX
from cpplan.spec.workload import Request

LOSS_COLUMNS = tuple((QUANTITY_INDEX[q.name], q.count) for q in ADDITIVE if q.only == "loss")
"""``(column, count)`` of every additive quantity restricted to tokens whose logits are needed."""


@dataclass(frozen=True, kw_only=True, eq=False)
class LossPositions:
    """Every request's needed positions, flattened in request order: request ``r``'s are
    ``flags[ptr[r]:ptr[r + 1]]`` (one per token)."""

    flags: np.ndarray
    ptr: np.ndarray

    @classmethod
    def of(cls, requests: Sequence[Request]) -> LossPositions | None:
        """The needed positions of ``requests``, or ``None`` when no loss request has a mask (each then
        needs all of its positions or none, and the per-segment flag is exact)."""
        if not any(r.output == "loss" and r.loss_mask is not None for r in requests):
            return None
        needed = [r.logits_needed() for r in requests]
        lengths = np.array([n.size for n in needed], dtype=np.int64)
        flags = np.concatenate(needed)
        flags.flags.writeable = False
        return cls(flags=flags, ptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    def gather(self, requests: np.ndarray) -> np.ndarray:
        """The flags of ``requests``, concatenated in the order given."""
        lengths = np.diff(self.ptr)
        return self.flags[chain_positions(self.ptr[:-1], lengths, np.asarray(requests, dtype=np.int64))]


def token_loss(layout: PackedLayout, positions: LossPositions) -> np.ndarray:
    """Per packed token of ``layout``: whether some request through it needs its logits."""
    where = chain_positions(layout.seg_offset, layout.seg_length, layout.request_segments)
    needed = np.zeros(layout.packed_tokens, dtype=bool)
    needed[where[positions.gather(layout.request_ids)]] = True
    return needed


def with_token_loss(layout: PackedLayout, positions: LossPositions | None) -> PackedLayout:
    """``layout`` carrying its per-token needed flags (unchanged when ``positions`` is ``None``)."""
    if positions is None:
        return layout
    return dataclasses.replace(layout, token_loss=token_loss(layout, positions))


def _token_values(count: str, needed: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """What each token adds to a ``count`` quantity restricted to needed tokens."""
    return SPAN_RULES[count](needed.astype(np.int64), positions) * needed


def set_loss_prefix(cumulative: np.ndarray, bounds: np.ndarray, layout: PackedLayout) -> None:
    """Overwrite the loss columns of ``cumulative`` (amounts of the tokens before each of ``bounds``)
    from ``layout.token_loss``."""
    needed = layout.token_loss
    assert needed is not None
    positions = _token_positions(layout)
    for column, count in LOSS_COLUMNS:
        prefix = np.concatenate([[0], np.cumsum(_token_values(count, needed, positions))])
        cumulative[:, column] = prefix[bounds]


def layout_totals(amounts: np.ndarray, layout: PackedLayout) -> np.ndarray:
    """``amounts`` (a layout's closed-form totals, one per quantity) with its loss columns recounted
    from ``layout.token_loss`` when the layout has one."""
    if layout.token_loss is None:
        return amounts
    amounts = amounts.copy()
    bounds = np.array([0, layout.packed_tokens])
    cumulative = np.zeros((2, amounts.size), dtype=amounts.dtype)
    set_loss_prefix(cumulative, bounds, layout)
    for column, _ in LOSS_COLUMNS:
        amounts[column] = cumulative[1, column]
    return amounts


def _token_positions(layout: PackedLayout) -> np.ndarray:
    """Every packed token's position in its requests."""
    shift = np.repeat(layout.seg_offset - layout.seg_position, layout.seg_length)
    return np.arange(layout.packed_tokens, dtype=np.int64) - shift


def set_node_loss(amounts: np.ndarray, tree: PrefixTree, positions: LossPositions) -> None:
    """Overwrite the loss columns of per-node ``amounts`` (one copy of each prefix-tree node): the
    node's positions needed by any request through it, an upper bound for every copy of the node."""
    offsets = np.concatenate([[0], np.cumsum(tree.node_length)[:-1]]).astype(np.int64)
    total = int(tree.node_length.sum())
    needed = np.zeros(total, dtype=bool)
    needed[chain_positions(offsets, tree.node_length, tree.path_nodes)[positions.flags]] = True
    node_of = np.repeat(np.arange(tree.num_nodes), tree.node_length)
    shift = np.repeat(offsets - tree.node_start, tree.node_length)
    token_positions = np.arange(total, dtype=np.int64) - shift
    for column, count in LOSS_COLUMNS:
        values = _token_values(count, needed, token_positions)
        amounts[:, column] = np.bincount(node_of, weights=values, minlength=tree.num_nodes).astype(np.int64)
