"""From a plan to the tensors one CP rank runs: owned tokens, tree metadata, read-back and loss indices.

A :class:`~cpplan.result.Plan` keeps each wave's packed layout and chunk ownership but no token ids. The
tokens are rebuilt from the workload the plan was made for: ``PackedLayout.seg_src`` and
``request_ids`` index the workload's requests in flattened (item, request) order, the same order
:class:`~cpplan.problem.Problem` builds its prefix tree in. Every step is a numpy gather over whole
arrays; nothing loops over tokens or segments in Python.

Targets of the summed loss are expressed on packed positions. A token inside segment ``s`` predicts the
next token of ``s`` for every loss request whose chain holds ``s``; the last token of ``s`` predicts the
first token of each child segment ``c``, once per loss request through ``c``. Summing
``weight * cross_entropy`` over these pairs equals summing every request's own next-token loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .ownership import owned_ranges
from .result import Plan, PlanResult
from .wave import WavePlan
from .workload import Workload

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, eq=False)
class RankBatch:
    """What one CP rank needs to run one wave. Every tensor is int64 on the CPU.

    Owned tokens (``input_ids``, ``position_ids``, ``packed_index``) are 1-D, in packed order;
    ``packed_index`` holds their positions in the wave's packed sequence. ``segment_ids``,
    ``parent_ids`` and ``token_owner`` cover the *whole* wave (indexed by packed position), because a
    rank's queries attend to keys it does not own. ``seg_*`` arrays are indexed by segment; a segment's
    parent precedes it (``seg_parent[s] < s``, -1 for a root). Request ``k`` of the wave (``requests[k]``
    is its ``(item id, request index in the item)``) reads back from packed positions
    ``readback_index[readback_ptr[k]:readback_ptr[k + 1]]``. The rank's share of the summed loss over
    every loss request's (``output == "loss"``) next-token targets is ``sum(loss_weights *
    CE(logits[loss_index], loss_targets))`` with ``loss_index`` local (into the owned tokens).
    Batches of one :func:`materialize_wave` call share their whole-wave tensors: treat them as
    read-only.
    """

    wave: int
    rank: int
    num_ranks: int
    chunk_tokens: int
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    packed_index: torch.Tensor
    ranges: tuple[tuple[int, int], ...]
    segment_ids: torch.Tensor
    parent_ids: torch.Tensor
    token_owner: torch.Tensor
    seg_parent: torch.Tensor
    seg_offset: torch.Tensor
    seg_length: torch.Tensor
    seg_position: torch.Tensor
    requests: tuple[tuple[str, int], ...]
    readback_index: torch.Tensor
    readback_ptr: torch.Tensor
    loss_index: torch.Tensor
    loss_targets: torch.Tensor
    loss_weights: torch.Tensor

    @property
    def num_tokens(self) -> int:
        """Tokens this rank owns."""
        return int(self.packed_index.numel())

    @property
    def packed_tokens(self) -> int:
        """Tokens in the wave's packed sequence."""
        return int(self.segment_ids.numel())

    @property
    def num_segments(self) -> int:
        """Segments of the wave."""
        return int(self.seg_length.numel())

    @property
    def num_requests(self) -> int:
        """Requests of the wave."""
        return len(self.requests)

    def readback(self, k: int) -> torch.Tensor:
        """Packed positions that read the wave's k-th request back, in token order."""
        return self.readback_index[int(self.readback_ptr[k]) : int(self.readback_ptr[k + 1])]


def materialize(plan: Plan | PlanResult, workload: Workload, *, wave: int, rank: int) -> RankBatch:
    """The tensors CP rank ``rank`` needs to run wave ``wave`` of ``plan`` (made for ``workload``)."""
    data = _WaveData.build(plan, workload, wave)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= rank < data.num_ranks:
        raise InputError(
            f"rank {rank!r} is out of range: the plan has {data.num_ranks} CP ranks", field="rank"
        )
    return data.rank_batch(int(rank))


def materialize_wave(plan: Plan | PlanResult, workload: Workload, *, wave: int) -> tuple[RankBatch, ...]:
    """Every CP rank's batch for one wave; whole-wave tensors are built once and shared."""
    data = _WaveData.build(plan, workload, wave)
    return tuple(data.rank_batch(r) for r in range(data.num_ranks))


@dataclass(frozen=True, kw_only=True, eq=False)
class _WaveData:
    """Whole-wave arrays every rank's batch is cut from."""

    wave: int
    plan_wave: WavePlan
    num_ranks: int
    flat_tokens: np.ndarray
    request_base: np.ndarray
    segment_ids: np.ndarray
    token_owner: np.ndarray
    seg_loss_count: np.ndarray
    requests: tuple[tuple[str, int], ...]
    tensors: dict[str, torch.Tensor]

    @classmethod
    def build(cls, plan: Plan | PlanResult, workload: Workload, wave: int) -> _WaveData:
        if isinstance(plan, PlanResult):
            plan = plan.plan
        if not isinstance(plan, Plan):
            raise InputError(f"expected a Plan or PlanResult, got {type(plan).__name__}", field="plan")
        if isinstance(wave, bool) or not isinstance(wave, int | np.integer) or not 0 <= wave < plan.num_waves:
            raise InputError(
                f"wave {wave!r} is out of range: the plan has {plan.num_waves} waves", field="wave"
            )
        wp = plan.waves[int(wave)]
        layout = wp.layout
        item_ptr = np.cumsum([0, *(len(item.requests) for item in workload.items)])
        num_requests = int(item_ptr[-1])
        if layout.request_ids.size and int(layout.request_ids.max()) >= num_requests:
            raise InputError(
                f"wave {wave} reads request {int(layout.request_ids.max())} but the workload has only "
                f"{num_requests} requests: is this the workload the plan was made for?",
                file=workload.source,
                field="workload",
            )
        wave_requests = layout.request_ids.tolist()
        item_of = dict(
            zip(
                wave_requests,
                (np.searchsorted(item_ptr, wave_requests, side="right") - 1).tolist(),
                strict=True,
            )
        )
        index_of = {r: r - int(item_ptr[i]) for r, i in item_of.items()}
        sequences = {r: workload.items[i].requests[index_of[r]].tokens for r, i in item_of.items()}
        _check_chains(layout, sequences, item_of, index_of, workload, int(wave))
        # Token ids of every request a segment is copied from, in one flat array.
        srcs = np.unique(layout.seg_src)
        lengths = np.array([sequences[s].size for s in srcs.tolist()], dtype=np.int64)
        request_base = np.zeros(num_requests, dtype=np.int64)
        request_base[srcs] = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if srcs.size else srcs
        flat_tokens = (
            np.concatenate([sequences[s] for s in srcs.tolist()]) if srcs.size else np.zeros(0, np.int64)
        )
        seg_length = layout.seg_length
        num_segments = layout.num_segments
        segment_ids = np.repeat(np.arange(num_segments, dtype=np.int64), seg_length)
        token_owner = np.repeat(wp.owner.astype(np.int64), wp.stats.tokens)
        assert token_owner.size == segment_ids.size
        chain_lengths = np.diff(layout.request_ptr)
        outputs = [workload.items[item_of[r]].requests[index_of[r]].output for r in wave_requests]
        is_loss = np.array([o == "loss" for o in outputs], dtype=np.float64)
        seg_loss_count = np.bincount(
            layout.request_segments, weights=np.repeat(is_loss, chain_lengths), minlength=num_segments
        ).astype(np.int64)
        readback_index, readback_ptr = _readback(layout)
        parent_ids = np.repeat(layout.seg_parent, seg_length)
        import torch  # here, not at module level: `import cpplan` stays light for the planner and CLI

        tensors = {
            "segment_ids": torch.from_numpy(segment_ids),
            "parent_ids": torch.from_numpy(parent_ids),
            "token_owner": torch.from_numpy(token_owner),
            "seg_parent": torch.from_numpy(layout.seg_parent.copy()),
            "seg_offset": torch.from_numpy(layout.seg_offset.copy()),
            "seg_length": torch.from_numpy(seg_length.copy()),
            "seg_position": torch.from_numpy(layout.seg_position.copy()),
            "readback_index": torch.from_numpy(readback_index),
            "readback_ptr": torch.from_numpy(readback_ptr),
        }
        return cls(
            wave=int(wave),
            plan_wave=wp,
            num_ranks=int(wp.quantities.shape[0]),
            flat_tokens=flat_tokens,
            request_base=request_base,
            segment_ids=segment_ids,
            token_owner=token_owner,
            seg_loss_count=seg_loss_count,
            requests=tuple((workload.items[item_of[r]].id, index_of[r]) for r in wave_requests),
            tensors=tensors,
        )

    def tokens_at(self, segments: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Token ids at original ``positions`` of the requests ``segments`` are copied from."""
        src = self.plan_wave.layout.seg_src[segments]
        return self.flat_tokens[self.request_base[src] + positions]

    def rank_batch(self, rank: int) -> RankBatch:
        import torch

        layout = self.plan_wave.layout
        packed_index = np.flatnonzero(self.token_owner == rank).astype(np.int64)
        segments = self.segment_ids[packed_index]
        within = packed_index - layout.seg_offset[segments]
        position_ids = layout.seg_position[segments] + within
        input_ids = self.tokens_at(segments, position_ids)
        loss_index, loss_targets, loss_weights = self._loss_pairs(rank, packed_index, segments, within)
        stats = self.plan_wave.stats
        return RankBatch(
            wave=self.wave,
            rank=rank,
            num_ranks=self.num_ranks,
            chunk_tokens=stats.chunk_tokens,
            input_ids=torch.from_numpy(input_ids),
            position_ids=torch.from_numpy(position_ids),
            packed_index=torch.from_numpy(packed_index),
            ranges=tuple(owned_ranges(self.plan_wave.owner, stats, rank)),
            requests=self.requests,
            loss_index=torch.from_numpy(loss_index),
            loss_targets=torch.from_numpy(loss_targets),
            loss_weights=torch.from_numpy(loss_weights),
            **self.tensors,
        )

    def _loss_pairs(
        self, rank: int, packed_index: np.ndarray, segments: np.ndarray, within: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        layout = self.plan_wave.layout
        local = np.arange(packed_index.size, dtype=np.int64)
        # Inside a segment: the next token of the same segment, once per loss request through it.
        inner = within < layout.seg_length[segments] - 1
        inner_index = local[inner]
        inner_targets = self.tokens_at(
            segments[inner], layout.seg_position[segments[inner]] + within[inner] + 1
        )
        inner_weights = self.seg_loss_count[segments[inner]]
        # The last token of a parent: each child's first token, once per loss request through the child.
        children = np.flatnonzero(layout.seg_parent >= 0)
        parents = layout.seg_parent[children]
        last = layout.seg_offset[parents] + layout.seg_length[parents] - 1
        mine = self.token_owner[last] == rank
        children, last = children[mine], last[mine]
        edge_index = np.searchsorted(packed_index, last)
        edge_targets = self.tokens_at(children, layout.seg_position[children])
        edge_weights = self.seg_loss_count[children]
        index = np.concatenate([inner_index, edge_index])
        order = np.argsort(index, kind="stable")
        weights = np.concatenate([inner_weights, edge_weights])[order]
        keep = weights > 0
        return (
            index[order][keep],
            np.concatenate([inner_targets, edge_targets])[order][keep],
            weights[keep],
        )


def _check_chains(layout, sequences, item_of, index_of, workload: Workload, wave: int) -> None:
    """Each request's segment chain must start at position 0, be contiguous and cover the request
    (a segment is copied from a request whose chain holds it, so its span is then in bounds too)."""
    chain_lengths = np.diff(layout.request_ptr)
    segs = layout.request_segments
    totals = np.add.reduceat(layout.seg_length[segs], layout.request_ptr[:-1]) if segs.size else segs
    expected = np.array([sequences[r].size for r in layout.request_ids.tolist()], dtype=np.int64)
    first = np.zeros(segs.size, dtype=bool)
    first[layout.request_ptr[:-1][chain_lengths > 0]] = True
    starts = layout.seg_position[segs]
    previous_end = np.concatenate([[0], starts[:-1] + layout.seg_length[segs[:-1]]]) if segs.size else starts
    contiguous = np.where(first, starts == 0, starts == previous_end)
    bad_request = np.flatnonzero((totals != expected) | (chain_lengths == 0))
    if not contiguous.all():
        k = int(np.searchsorted(layout.request_ptr, np.flatnonzero(~contiguous)[0], side="right") - 1)
        bad_request = np.union1d(bad_request, [k])
    if bad_request.size:
        k = int(bad_request[0])
        r = int(layout.request_ids[k])
        item = workload.items[item_of[r]]
        raise InputError(
            f"wave {wave} does not match the workload: item {item.id!r} request {index_of[r]} has "
            f"{sequences[r].size} tokens, but the plan's segment chain reads {int(totals[k])}; "
            "is this the workload the plan was made for?",
            file=workload.source,
            field=f"items[{item_of[r]}].requests[{index_of[r]}]",
        )


def _readback(layout) -> tuple[np.ndarray, np.ndarray]:
    """Every request's packed positions, concatenated in wave order, and the offsets between them."""
    segs = layout.request_segments
    lengths = layout.seg_length[segs]
    per_request = np.add.reduceat(lengths, layout.request_ptr[:-1]) if segs.size else lengths
    ptr = np.concatenate([[0], np.cumsum(per_request)]).astype(np.int64)
    run_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    index = np.repeat(layout.seg_offset[segs] - run_start, lengths) + np.arange(int(ptr[-1]), dtype=np.int64)
    return index, ptr


__all__ = ["RankBatch", "materialize", "materialize_wave"]
