"""A wave's loss pairs: every counted next-token target as (packed position, target id, weight).

Request ``k`` counts its token ``t + 1`` as a target where ``predicted()[t]`` is set (output ``"loss"``;
the ``loss_mask`` shifted by one where given). Read back through the packed sequence, the target is a
packed token copy ``p``; the logits predicting it are those of the packed token before ``p`` in its
segment, or, when ``p`` starts a segment, of the parent segment's last token (a branch point predicts
each child's first token). Counting requests sharing a copy ``p`` share its pair, and two children of
one parent that start with the same token share a pair too; each distinct pair is listed once with the
number of counting requests through it as its weight, so ``sum(weight * CE)`` over the pairs is the sum
of every request's own masked next-token loss. Everything is a whole-wave numpy gather; only requests
with a mask are visited one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.spec.workload import Request


def counted_targets(requests: Sequence[Request], readback_ptr: np.ndarray) -> np.ndarray:
    """Over the wave's read-back entries (request after request, token by token), whether each token
    is a counted target: token ``t + 1`` of a request where its ``predicted()[t]`` is set."""
    lengths = np.diff(readback_ptr)
    counted = np.repeat(np.array([r.output == "loss" for r in requests], dtype=bool), lengths)
    counted[readback_ptr[:-1]] = False
    for k, request in enumerate(requests):
        if request.output == "loss" and request.loss_mask is not None:
            counted[readback_ptr[k] + 1 : readback_ptr[k + 1]] = request.predicted()
    return counted


@dataclass(frozen=True, kw_only=True, eq=False)
class LossPairs:
    """The wave's distinct loss pairs, sorted by ``source`` (the packed position whose logits predict)
    then ``target`` (the token id predicted); ``weight``: the counting requests sharing the pair;
    ``owner``: the CP rank owning ``source``."""

    source: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    owner: np.ndarray

    @classmethod
    def of(
        cls,
        layout,
        requests: Sequence[Request],
        packed_ids: np.ndarray,
        readback_index: np.ndarray,
        readback_ptr: np.ndarray,
    ) -> LossPairs:
        """The pairs of a wave: ``layout`` its segments and token owners (a
        :class:`~cpplan.pricing.plan_reader.WaveArrays`), ``requests`` in wave order, ``packed_ids``
        every packed token's id, and the read-back indices of every request."""
        counted = counted_targets(requests, readback_ptr)
        weight = np.bincount(readback_index[counted], minlength=packed_ids.size)
        copies = np.flatnonzero(weight)
        segment = np.searchsorted(layout.seg_offset, copies, side="right") - 1
        starts = copies == layout.seg_offset[segment]
        inner, edge = copies[~starts], copies[starts]
        source, target, pair_weight = _edge_pairs(layout, edge, packed_ids, weight)
        source = np.concatenate([inner - 1, source])
        order = np.argsort(source, kind="stable")
        source = source[order]
        return cls(
            source=source,
            target=np.concatenate([packed_ids[inner], target])[order],
            weight=np.concatenate([weight[inner], pair_weight])[order],
            owner=layout.token_owner[source],
        )

    def of_rank(self, rank: int, packed_index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs rank ``rank`` computes: ``(loss_index, loss_targets, loss_weights)`` with
        ``loss_index`` into its owned tokens (``packed_index``, ascending)."""
        mine = self.owner == rank
        return np.searchsorted(packed_index, self.source[mine]), self.target[mine], self.weight[mine]


def _edge_pairs(
    layout, copies: np.ndarray, packed_ids: np.ndarray, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs of counted targets that start a segment: source the parent's last token; children of
    one parent starting with the same token merged. Sorted by (source, target)."""
    segment = np.searchsorted(layout.seg_offset, copies, side="right") - 1
    parent = layout.seg_parent[segment]
    assert (parent >= 0).all(), "a root segment's first token (position 0) is never a target"
    source = layout.seg_offset[parent] + layout.seg_length[parent] - 1
    target = packed_ids[copies]
    order = np.lexsort((target, source))
    source, target, pair_weight = source[order], target[order], weight[copies][order]
    new = np.r_[True, (source[1:] != source[:-1]) | (target[1:] != target[:-1])] if source.size else source
    starts = np.flatnonzero(new)
    summed = np.add.reduceat(pair_weight, starts) if starts.size else pair_weight
    return source[starts], target[starts], summed
