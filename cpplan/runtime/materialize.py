"""From a plan to the tensors one CP rank runs: owned tokens, tree metadata, read-back and loss indices.

A :class:`~cpplan.plans.plan.Plan` keeps each wave's packed layout and chunk ownership but no token ids.
The tokens are rebuilt from the workload the plan was made for: ``PackedLayout.seg_src`` and ``request_ids``
index the workload's requests in flattened (item, request) order, the same order
:class:`~cpplan.pricing.problem.Problem` builds its prefix tree in. A plan file (the JSON ``cpplan plan``
writes, as a path or a loaded dictionary) works too: :mod:`cpplan.plans.plan_reader` reads and checks its
segments, request chains and owned ranges. Every step is a numpy gather over whole arrays; nothing loops over
tokens or segments in Python. Every request read back through the packed sequence is compared with the
workload's tokens, so a plan used with another workload is refused.

Targets of the summed loss are expressed on packed positions. A request counts the target at its
token ``t + 1`` where :meth:`~cpplan.spec.workload.Request.predicted` is set (output ``"loss"``; every
position without a ``loss_mask``); read back through the packed sequence, that target's packed copy is
predicted by the packed token before it in its segment, or, for a segment's first token, by the last
token of the parent segment (a branch point predicts each child's first token). Each distinct (packed
position, target id) pair is listed once, weighted by the counting requests through it, so summing
``weight * cross_entropy`` over the pairs equals summing every request's own masked next-token loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cpplan.errors import InputError
from cpplan.plans.plan import Plan
from cpplan.plans.plan_reader import WaveArrays, plan_waves, read_plan_file, read_wave
from cpplan.plans.result import PlanResult
from cpplan.pricing.layout import chain_positions
from cpplan.runtime.kernel_fields import WavePieces, ancestor_table, rank_kernel_fields, wave_pieces
from cpplan.runtime.loss_pairs import LossPairs
from cpplan.spec.workload import Request, Workload

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, eq=False)
class RankBatch:
    """What one CP rank needs to run one wave. Every tensor is an int64 CPU tensor, except the two
    int32 ``*_cu_seqlens``.

    Owned tokens (``input_ids``, ``position_ids``, ``packed_index``) are 1-D, in packed order;
    ``packed_index`` holds their positions in the wave's packed sequence. ``segment_ids``,
    ``parent_ids`` and ``token_owner`` cover the *whole* wave (indexed by packed position), because a
    rank's queries attend to keys it does not own. ``seg_*`` arrays are indexed by segment; a segment's
    parent precedes it (``seg_parent[s] < s``, -1 for a root). Request ``k`` of the wave (``requests[k]``
    is its ``(item id, request index in the item)``) reads back from packed positions
    ``readback_index[readback_ptr[k]:readback_ptr[k + 1]]``. The rank's share of the summed loss over
    every counted next-token target (those :meth:`~cpplan.spec.workload.Request.predicted` sets: output
    ``"loss"``, the ``loss_mask`` where given) is ``sum(loss_weights * CE(logits[loss_index],
    loss_targets))`` with ``loss_index`` local (into the owned tokens, ascending) and ``loss_weights`` the
    number of counting requests sharing each (position, target) pair.

    Kernel fields (``docs/materialize.md`` draws them): the rank's *pieces* are the maximal runs of
    consecutive packed positions of one segment it owns, in owned order; piece ``i`` is the owned tokens
    ``piece_cu_seqlens[i]:piece_cu_seqlens[i + 1]`` of segment ``piece_segment[i]``. Its queries may see
    the packed positions ``attn_k_index[attn_k_cu_seqlens[i]:attn_k_cu_seqlens[i + 1]]``: the segment's
    ancestors' tokens, root first, then the segment's own tokens up to the piece's last, so its queries
    are the last keys of that list, and causal varlen attention aligned bottom-right over
    ``(piece_cu_seqlens, attn_k_cu_seqlens)`` is the tree mask. ``max_seqlen_q`` and ``max_seqlen_k``
    bound the pieces and key lists. A piece starts from the final recurrent state of piece
    ``state_source_piece[i]`` of rank ``state_source_rank[i]`` (both -1: a zero state); its conv tail
    is the keys just before its queries in its key list.
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
    piece_cu_seqlens: torch.Tensor
    piece_segment: torch.Tensor
    attn_k_index: torch.Tensor
    attn_k_cu_seqlens: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    state_source_rank: torch.Tensor
    state_source_piece: torch.Tensor

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

    @property
    def num_pieces(self) -> int:
        """Pieces of this rank."""
        return int(self.piece_segment.numel())

    def block_mask(self, *, block_size: int = 128):
        """The flex_attention ``BlockMask`` of this rank's owned queries against every packed key of the
        wave (the tree mask), built on each call and cached nowhere (:class:`TreeMask.block_mask
        <cpplan.runtime.attention_mask.TreeMask>`)."""
        from cpplan.runtime.attention_mask import TreeMask

        return TreeMask.for_batch(self).block_mask(block_size=block_size)

    def packed_seq_params(self) -> dict[str, Any]:
        """Keyword arguments of Megatron-Core's ``PackedSeqParams`` for a wave without sharing: the
        pieces as query sequences over the owned tokens, the key lists (``keys[attn_k_index]``) as
        key/value sequences. At CP 1 the two are the same (every piece is a whole request); under CP a
        piece continuing its request has more keys than queries and needs a bottom-right causal mask
        (Transformer Engine's ``causal_bottom_right``). Raises ``ValueError`` when segments share a
        prefix: such key lists overlap, which ``PackedSeqParams`` cannot describe."""
        shared = np.flatnonzero(self.seg_parent.numpy() >= 0)
        if shared.size:
            s = int(shared[0])
            raise ValueError(
                f"wave {self.wave} shares prefixes (segment {s} continues segment "
                f"{int(self.seg_parent[s])}): PackedSeqParams describes independent sequences; use "
                "piece_cu_seqlens, attn_k_index and attn_k_cu_seqlens with a varlen kernel, or block_mask()"
            )
        return {
            "qkv_format": "thd",
            "cu_seqlens_q": self.piece_cu_seqlens,
            "cu_seqlens_kv": self.attn_k_cu_seqlens,
            "max_seqlen_q": self.max_seqlen_q,
            "max_seqlen_kv": self.max_seqlen_k,
        }


PlanLike = Plan | PlanResult | dict[str, Any] | str | Path


def materialize(plan: PlanLike, workload: Workload, *, wave: int, rank: int) -> RankBatch:
    """The tensors CP rank ``rank`` needs to run wave ``wave`` of ``plan`` (made for ``workload``).

    ``plan``: a :class:`~cpplan.plans.plan.Plan`, a :class:`~cpplan.plans.result.PlanResult`, or a plan
    file's JSON (a path or the loaded dictionary)."""
    data = _WaveData.build(plan, workload, wave)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= rank < data.num_ranks:
        raise InputError(
            f"rank {rank!r} is out of range: the plan has {data.num_ranks} CP ranks", field="rank"
        )
    return data.rank_batch(int(rank))


def materialize_wave(plan: PlanLike, workload: Workload, *, wave: int) -> tuple[RankBatch, ...]:
    """Every CP rank's batch for one wave; whole-wave tensors are built once and shared."""
    data = _WaveData.build(plan, workload, wave)
    return tuple(data.rank_batch(r) for r in range(data.num_ranks))


def _load_plan(plan: PlanLike) -> tuple[Plan | None, dict[str, Any] | None, int]:
    """The plan object or its JSON dictionary, and its number of waves."""
    if isinstance(plan, PlanResult):
        plan = plan.plan
    if isinstance(plan, Plan):
        return plan, None, plan.num_waves
    if isinstance(plan, str | Path):
        plan = read_plan_file(plan)
    if not isinstance(plan, dict):
        raise InputError(f"expected a Plan, PlanResult or plan JSON, got {type(plan).__name__}", field="plan")
    return None, plan, len(plan_waves(plan))


@dataclass(frozen=True, kw_only=True, eq=False)
class _WaveData:
    """Whole-wave arrays every rank's batch is cut from."""

    wave: int
    source: WaveArrays
    flat_tokens: np.ndarray
    request_base: np.ndarray
    segment_ids: np.ndarray
    loss_pairs: LossPairs
    requests: tuple[tuple[str, int], ...]
    tensors: dict[str, torch.Tensor]
    pieces: WavePieces
    ancestors: tuple[np.ndarray, np.ndarray]

    @property
    def num_ranks(self) -> int:
        return self.source.num_ranks

    @classmethod
    def build(cls, plan: PlanLike, workload: Workload, wave: int) -> _WaveData:
        """Read wave ``wave`` of ``plan``, check it against ``workload`` and gather its token ids."""
        source = _wave_arrays(plan, workload, wave)
        requests = _WaveRequests.of(source, workload)
        _check_chains(source, requests, int(wave))
        flat_tokens, request_base = _flat_tokens(source, requests, workload.num_requests)
        segment_ids = np.repeat(np.arange(source.num_segments, dtype=np.int64), source.seg_length)
        assert source.token_owner.size == segment_ids.size
        readback_index, readback_ptr = _readback(source)
        within = np.arange(segment_ids.size) - source.seg_offset[segment_ids]
        src = source.seg_src[segment_ids]
        packed_ids = flat_tokens[request_base[src] + source.seg_position[segment_ids] + within]
        _check_tokens(packed_ids, readback_index, readback_ptr, source, requests)
        return cls(
            wave=int(wave),
            source=source,
            flat_tokens=flat_tokens,
            request_base=request_base,
            segment_ids=segment_ids,
            loss_pairs=LossPairs.of(
                source, [requests.request(r) for r in requests.ids], packed_ids, readback_index, readback_ptr
            ),
            requests=requests.labels,
            tensors=_whole_wave_tensors(source, segment_ids, readback_index, readback_ptr),
            pieces=wave_pieces(
                segment_ids, source.token_owner, source.seg_parent, source.seg_offset, source.seg_length
            ),
            ancestors=ancestor_table(source.seg_parent),
        )

    def tokens_at(self, segments: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Token ids at original ``positions`` of the requests ``segments`` are copied from."""
        src = self.source.seg_src[segments]
        return self.flat_tokens[self.request_base[src] + positions]

    def rank_batch(self, rank: int) -> RankBatch:
        import torch

        source = self.source
        packed_index = np.flatnonzero(source.token_owner == rank).astype(np.int64)
        segments = self.segment_ids[packed_index]
        within = packed_index - source.seg_offset[segments]
        position_ids = source.seg_position[segments] + within
        input_ids = self.tokens_at(segments, position_ids)
        loss_index, loss_targets, loss_weights = self.loss_pairs.of_rank(rank, packed_index, segments, within)
        breaks = np.flatnonzero(np.diff(packed_index) != 1) + 1
        starts = packed_index[np.r_[0, breaks]] if packed_index.size else packed_index
        ends = (
            packed_index[np.r_[breaks - 1, packed_index.size - 1]] + 1 if packed_index.size else packed_index
        )
        ranges = tuple(zip(starts.tolist(), ends.tolist(), strict=True))
        kernel = rank_kernel_fields(self.pieces, rank, source.seg_offset, source.seg_length, self.ancestors)
        return RankBatch(
            wave=self.wave,
            rank=rank,
            num_ranks=source.num_ranks,
            chunk_tokens=source.chunk_tokens,
            input_ids=torch.from_numpy(input_ids),
            position_ids=torch.from_numpy(position_ids),
            packed_index=torch.from_numpy(packed_index),
            ranges=ranges,
            requests=self.requests,
            loss_index=torch.from_numpy(loss_index),
            loss_targets=torch.from_numpy(loss_targets),
            loss_weights=torch.from_numpy(loss_weights),
            **self.tensors,
            **{k: v if isinstance(v, int) else torch.from_numpy(v) for k, v in kernel.items()},
        )


def _wave_arrays(plan: PlanLike, workload: Workload, wave: int) -> WaveArrays:
    """The wave's arrays from a plan object or plan JSON; every request it reads is in the workload."""
    plan_object, plan_json, num_waves = _load_plan(plan)
    if isinstance(wave, bool) or not isinstance(wave, int | np.integer) or not 0 <= wave < num_waves:
        raise InputError(f"wave {wave!r} is out of range: the plan has {num_waves} waves", field="wave")
    if plan_object is not None:
        source = WaveArrays.from_wave_plan(plan_object.waves[int(wave)])
    else:
        source = read_wave(plan_json, int(wave), workload)
    num_requests = workload.num_requests
    if source.request_ids.size and int(source.request_ids.max()) >= num_requests:
        raise InputError(
            f"wave {wave} reads request {int(source.request_ids.max())} but the workload has only "
            f"{num_requests} requests: is this the workload the plan was made for?",
            file=workload.source,
            field="workload",
        )
    return source


@dataclass(frozen=True, kw_only=True, eq=False)
class _WaveRequests:
    """The wave's requests in the workload, by flattened request id: item index, index in the item and
    token ids."""

    workload: Workload
    ids: list[int]
    item_of: dict[int, int]
    index_of: dict[int, int]
    sequences: dict[int, np.ndarray]

    @classmethod
    def of(cls, source: WaveArrays, workload: Workload) -> _WaveRequests:
        """Look up the requests ``source`` reads."""
        item_ptr = np.cumsum([0, *(len(item.requests) for item in workload.items)])
        ids = source.request_ids.tolist()
        items = (np.searchsorted(item_ptr, ids, side="right") - 1).tolist()
        item_of = dict(zip(ids, items, strict=True))
        index_of = {r: r - int(item_ptr[i]) for r, i in item_of.items()}
        sequences = {r: workload.items[i].requests[index_of[r]].tokens for r, i in item_of.items()}
        return cls(workload=workload, ids=ids, item_of=item_of, index_of=index_of, sequences=sequences)

    def request(self, r: int) -> Request:
        """The workload's request ``r``."""
        return self.workload.items[self.item_of[r]].requests[self.index_of[r]]

    def item_id(self, r: int) -> str:
        """The id of request ``r``'s item."""
        return self.workload.items[self.item_of[r]].id

    @property
    def labels(self) -> tuple[tuple[str, int], ...]:
        """``(item id, request index in the item)`` of each request of the wave, in wave order."""
        return tuple((self.item_id(r), self.index_of[r]) for r in self.ids)

    def field(self, r: int) -> str:
        """The workload field naming request ``r``."""
        return f"items[{self.item_of[r]}].requests[{self.index_of[r]}]"


def _flat_tokens(
    source: WaveArrays, requests: _WaveRequests, num_requests: int
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every request a segment is copied from, in one flat array, and where each such
    request starts in it (indexed by flattened request id)."""
    srcs = np.unique(source.seg_src)
    lengths = np.array([requests.sequences[s].size for s in srcs.tolist()], dtype=np.int64)
    request_base = np.zeros(num_requests, dtype=np.int64)
    request_base[srcs] = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if srcs.size else srcs
    flat_tokens = (
        np.concatenate([requests.sequences[s] for s in srcs.tolist()]) if srcs.size else np.zeros(0, np.int64)
    )
    return flat_tokens, request_base


def _whole_wave_tensors(
    source: WaveArrays, segment_ids: np.ndarray, readback_index: np.ndarray, readback_ptr: np.ndarray
) -> dict[str, torch.Tensor]:
    """The tensors every rank's batch shares (indexed by packed position or by segment)."""
    import torch  # here, not at module level: `import cpplan` stays light for the planner and CLI

    return {
        "segment_ids": torch.from_numpy(segment_ids),
        "parent_ids": torch.from_numpy(np.repeat(source.seg_parent, source.seg_length)),
        "token_owner": torch.from_numpy(source.token_owner.copy()),
        "seg_parent": torch.from_numpy(source.seg_parent.copy()),
        "seg_offset": torch.from_numpy(source.seg_offset.copy()),
        "seg_length": torch.from_numpy(source.seg_length.copy()),
        "seg_position": torch.from_numpy(source.seg_position.copy()),
        "readback_index": torch.from_numpy(readback_index),
        "readback_ptr": torch.from_numpy(readback_ptr),
    }


def _check_chains(source: WaveArrays, requests: _WaveRequests, wave: int) -> None:
    """Each request's chain must run parent to child from a root, start at position 0, be contiguous
    and cover the request (a segment is copied from a request whose chain holds it, so its span is
    then in bounds too)."""
    segs = source.request_segments
    starts_at = source.request_ptr[:-1]
    totals = np.add.reduceat(source.seg_length[segs], starts_at)
    expected = np.array([requests.sequences[r].size for r in requests.ids], dtype=np.int64)
    first = np.zeros(segs.size, dtype=bool)
    first[starts_at] = True
    positions = source.seg_position[segs]
    previous_end = np.r_[0, positions[:-1] + source.seg_length[segs[:-1]]]
    previous_segment = np.r_[-1, segs[:-1]]
    linked = np.where(first, (positions == 0) & (source.seg_parent[segs] == -1), positions == previous_end)
    linked &= np.where(first, True, source.seg_parent[segs] == previous_segment)
    bad = np.flatnonzero(totals != expected)
    if not linked.all():
        bad = np.union1d(bad, np.searchsorted(source.request_ptr, np.flatnonzero(~linked), side="right") - 1)
    if bad.size:
        k = int(bad[0])
        r = requests.ids[k]
        problem = (
            f"has {requests.sequences[r].size} tokens, but the plan's segment chain reads {int(totals[k])}"
            if totals[k] != expected[k]
            else "has a segment chain that is not a root-to-leaf run of contiguous segments"
        )
        raise InputError(
            f"wave {wave} does not match the workload: item {requests.item_id(r)!r} request "
            f"{requests.index_of[r]} {problem}; is this the workload the plan was made for?",
            file=requests.workload.source,
            field=requests.field(r),
        )


def _check_tokens(
    packed_ids: np.ndarray,
    readback_index: np.ndarray,
    readback_ptr: np.ndarray,
    source: WaveArrays,
    requests: _WaveRequests,
) -> None:
    """Every request read back from the packed ids must be its own tokens: the plan keeps no token ids,
    so this is what catches a workload that is not the one planned (or a plan file whose shared
    segments are not shared prefixes)."""
    own = np.concatenate([requests.sequences[r] for r in requests.ids])
    wrong = np.flatnonzero(packed_ids[readback_index] != own)
    if wrong.size:
        k = int(np.searchsorted(readback_ptr, wrong[0], side="right") - 1)
        r = requests.ids[k]
        position = int(wrong[0] - readback_ptr[k])
        raise InputError(
            f"the plan's segments give token {position} of item {requests.item_id(r)!r} request "
            f"{requests.index_of[r]} as {int(packed_ids[readback_index[wrong[0]]])}, but the workload has "
            f"{int(own[wrong[0]])}; is this the workload the plan was made for?",
            file=requests.workload.source,
            field=f"{requests.field(r)}.tokens",
        )


def _readback(layout) -> tuple[np.ndarray, np.ndarray]:
    """Every request's packed positions, concatenated in wave order, and the offsets between them."""
    segs = layout.request_segments
    lengths = layout.seg_length[segs]
    per_request = np.add.reduceat(lengths, layout.request_ptr[:-1]) if segs.size else lengths
    ptr = np.concatenate([[0], np.cumsum(per_request)]).astype(np.int64)
    return chain_positions(layout.seg_offset, layout.seg_length, segs), ptr


__all__ = ["RankBatch", "materialize", "materialize_wave"]
