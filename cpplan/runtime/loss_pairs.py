"""A wave's loss pairs: every counted next-token target as (packed position, target id, weight).

Request ``k`` counts its token ``t + 1`` as a target where ``predicted()[t]`` is set (output ``"loss"``;
the ``loss_mask`` shifted by one where given). Read back through the packed sequence, the target is a
packed token copy ``p``; the logits predicting it are those of the packed token before ``p`` in its
segment, or, when ``p`` starts a segment, of the parent segment's last token (a branch point predicts
each child's first token). Counting requests sharing a copy share its pair, and children of one parent
that start with the same token share a pair too; each distinct pair is listed once, weighted by the
counting requests through it, so ``sum(weight * CE)`` over the pairs is the sum of every request's own
masked next-token loss.

A loss request without a mask counts every target on its chain (position 0 is never one), so its
weight is a per-segment count; only requests with a mask add per-token weights, gathered over their
own read-back positions. Without masks no per-token array of the whole wave is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.spec.workload import Request


@dataclass(frozen=True, kw_only=True, eq=False)
class LossPairs:
    """What every rank's loss pairs are cut from: ``layout`` (a
    :class:`~cpplan.plans.plan_reader.WaveArrays`), every packed token's id, the mask-free loss
    requests through each segment, and, when some request has a mask, the masked requests counting
    each packed token as a target."""

    layout: object
    packed_ids: np.ndarray
    seg_count: np.ndarray
    masked: np.ndarray | None

    @classmethod
    def of(
        cls,
        layout,
        requests: Sequence[Request],
        packed_ids: np.ndarray,
        readback_index: np.ndarray,
        readback_ptr: np.ndarray,
    ) -> LossPairs:
        """The weights of a wave: ``requests`` in wave order, ``packed_ids`` every packed token's id,
        and every request's read-back indices."""
        plain = np.array([r.output == "loss" and r.loss_mask is None for r in requests], dtype=np.float64)
        seg_count = np.bincount(
            layout.request_segments,
            weights=np.repeat(plain, np.diff(layout.request_ptr)),
            minlength=layout.num_segments,
        ).astype(np.int64)
        masked = None
        for k, request in enumerate(requests):
            if request.output == "loss" and request.loss_mask is not None:
                masked = np.zeros(packed_ids.size, dtype=np.int64) if masked is None else masked
                targets = readback_index[readback_ptr[k] + 1 : readback_ptr[k + 1]]
                np.add.at(masked, targets[request.predicted()], 1)
        return cls(layout=layout, packed_ids=packed_ids, seg_count=seg_count, masked=masked)

    def _weight(self, segments: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """The counting requests of target copies ``targets`` (in ``segments``)."""
        weight = self.seg_count[segments]
        return weight if self.masked is None else weight + self.masked[targets]

    def of_rank(
        self, rank: int, packed_index: np.ndarray, segments: np.ndarray, within: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs rank ``rank`` computes, ``(loss_index, loss_targets, loss_weights)``, sorted by
        ``loss_index`` (into its owned tokens ``packed_index``, whose segments and places in them are
        ``segments`` and ``within``), then target."""
        layout = self.layout
        inner = within < layout.seg_length[segments] - 1
        inner_index = np.flatnonzero(inner)
        inner_targets = packed_index[inner] + 1
        inner_weight = self._weight(segments[inner], inner_targets)
        edge_index, edge_targets, edge_weight = self._edges(rank, packed_index)
        index = np.concatenate([inner_index, edge_index])
        order = np.argsort(index, kind="stable")
        targets = self.packed_ids[np.concatenate([inner_targets, edge_targets])][order]
        weights = np.concatenate([inner_weight, edge_weight])[order]
        keep = weights > 0
        return index[order][keep], targets[keep], weights[keep]

    def _edges(self, rank: int, packed_index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Branch-point pairs of the rank: each child's first token, predicted by its parent's last
        token when the rank owns it; children starting with the same token merged. Returns the local
        index, the target copy (first of the merged) and the summed weight, sorted by (index, id)."""
        layout = self.layout
        children = np.flatnonzero(layout.seg_parent >= 0)
        parents = layout.seg_parent[children]
        last = layout.seg_offset[parents] + layout.seg_length[parents] - 1
        mine = layout.token_owner[last] == rank
        children, last = children[mine], last[mine]
        first = layout.seg_offset[children]
        weight = self._weight(children, first)
        order = np.lexsort((self.packed_ids[first], last))
        last, first, weight = last[order], first[order], weight[order]
        ids = self.packed_ids[first]
        new = np.concatenate([[True], (last[1:] != last[:-1]) | (ids[1:] != ids[:-1])])[: last.size]
        starts = np.flatnonzero(new)
        summed = np.add.reduceat(weight, starts) if starts.size else weight
        return np.searchsorted(packed_index, last[starts]), first[starts], summed
