"""From a plan to the tensors one CP rank runs: owned tokens, tree metadata, read-back and loss indices.

A :class:`~cpplan.pricing.result.Plan` keeps each wave's packed layout and chunk ownership but no token ids.
The tokens are rebuilt from the workload the plan was made for: ``PackedLayout.seg_src`` and ``request_ids``
index the workload's requests in flattened (item, request) order, the same order
:class:`~cpplan.pricing.problem.Problem` builds its prefix tree in. A plan file (the JSON ``cpplan plan``
writes, as a path or a loaded dictionary) works too: its segments, request chains and owned ranges are read
and checked. Every step is a numpy gather over whole arrays; nothing loops over tokens or segments in Python.
Every request read back through the packed sequence is compared with the workload's tokens, so a plan used
with another workload is refused.

Targets of the summed loss are expressed on packed positions. A token inside segment ``s`` predicts the
next token of ``s`` for every loss request whose chain holds ``s``; the last token of ``s`` predicts the
first token of each child segment ``c``, once per loss request through ``c``. Summing
``weight * cross_entropy`` over these pairs equals summing every request's own next-token loss.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cpplan.errors import InputError
from cpplan.pricing.layout import chain_positions
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.result import Plan, PlanResult
from cpplan.pricing.wave import WavePlan
from cpplan.spec.workload import Workload

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


PlanLike = Plan | PlanResult | dict[str, Any] | str | Path


def materialize(plan: PlanLike, workload: Workload, *, wave: int, rank: int) -> RankBatch:
    """The tensors CP rank ``rank`` needs to run wave ``wave`` of ``plan`` (made for ``workload``).

    ``plan``: a :class:`~cpplan.pricing.result.Plan`, a :class:`~cpplan.pricing.result.PlanResult`, or a plan
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


@dataclass(frozen=True, kw_only=True, eq=False)
class _WaveSource:
    """One wave's segments, request chains and token owners, from a WavePlan or from plan JSON.

    Segment and chain arrays mean what they mean in :class:`~cpplan.pricing.layout.PackedLayout`;
    ``token_owner`` is the CP rank of every packed token.
    """

    num_ranks: int
    chunk_tokens: int
    request_ids: np.ndarray
    seg_parent: np.ndarray
    seg_position: np.ndarray
    seg_length: np.ndarray
    seg_offset: np.ndarray
    seg_src: np.ndarray
    request_ptr: np.ndarray
    request_segments: np.ndarray
    token_owner: np.ndarray

    @classmethod
    def from_wave_plan(cls, wp: WavePlan) -> _WaveSource:
        layout = wp.layout
        return cls(
            num_ranks=int(wp.quantities.shape[0]),
            chunk_tokens=wp.stats.chunk_tokens,
            request_ids=layout.request_ids,
            seg_parent=layout.seg_parent,
            seg_position=layout.seg_position,
            seg_length=layout.seg_length,
            seg_offset=layout.seg_offset,
            seg_src=layout.seg_src,
            request_ptr=layout.request_ptr,
            request_segments=layout.request_segments,
            token_owner=np.repeat(wp.owner.astype(np.int64), wp.stats.tokens),
        )

    @classmethod
    def from_json(cls, data: dict[str, Any], w: int, workload: Workload, item_ptr: np.ndarray) -> _WaveSource:
        wave = data["waves"][w]
        where = f"waves[{w}]"
        segments = _int_array(wave.get("segments"), f"{where}.segments", width=3)
        num_segments = segments.shape[0]
        seg_parent, seg_position, seg_length = segments.T.copy()
        if (seg_length < 1).any() or (seg_position < 0).any():
            raise InputError("a segment has a negative position or no tokens", field=f"{where}.segments")
        if ((seg_parent < -1) | (seg_parent >= np.arange(num_segments))).any():
            raise InputError("a segment's parent must be -1 or an earlier segment", field=f"{where}.segments")
        requests = wave.get("requests")
        if not isinstance(requests, list) or not requests:
            raise InputError("must be a non-empty list", field=f"{where}.requests")
        request_ids, chains = [], []
        for k, entry in enumerate(requests):
            at = f"{where}.requests[{k}]"
            if not isinstance(entry, dict):
                raise InputError("must be an object with item, request and segments", field=at)
            item_id = entry.get("item")
            item = workload.index_of.get(item_id) if isinstance(item_id, str) else None
            if item is None:
                raise InputError(f"item {item_id!r} is not in the workload", field=f"{at}.item")
            index = entry.get("request")
            valid_index = isinstance(index, int) and not isinstance(index, bool)
            if not valid_index or not 0 <= index < len(workload.items[item].requests):
                raise InputError(f"no request {index!r} in item {entry['item']!r}", field=f"{at}.request")
            chain = _int_array(entry.get("segments"), f"{at}.segments")
            if chain.size == 0 or (chain < 0).any() or (chain >= num_segments).any():
                raise InputError(f"must list segments in [0, {num_segments})", field=f"{at}.segments")
            request_ids.append(int(item_ptr[item]) + index)
            chains.append(chain)
        request_ptr = np.cumsum([0, *(c.size for c in chains)]).astype(np.int64)
        request_segments = np.concatenate(chains)
        used, first = np.unique(request_segments, return_index=True)
        if used.size != num_segments:
            missing = int(np.setdiff1d(np.arange(num_segments), used)[0])
            raise InputError(f"segment {missing} is in no request's chain", field=f"{where}.segments")
        seg_src = np.array(request_ids, dtype=np.int64)[np.searchsorted(request_ptr, first, side="right") - 1]
        seg_offset = np.cumsum(np.r_[0, seg_length[:-1]]).astype(np.int64)
        num_ranks = _topology_cp(data)
        token_owner = _owners_from_ranges(wave.get("ranks"), num_ranks, int(seg_length.sum()), where)
        chunk_tokens = data.get("chunk_tokens", CHUNK_TOKENS)
        return cls(
            num_ranks=num_ranks,
            chunk_tokens=int(chunk_tokens) if isinstance(chunk_tokens, int) else CHUNK_TOKENS,
            request_ids=np.array(request_ids, dtype=np.int64),
            seg_parent=seg_parent,
            seg_position=seg_position,
            seg_length=seg_length,
            seg_offset=seg_offset,
            seg_src=seg_src,
            request_ptr=request_ptr,
            request_segments=request_segments,
            token_owner=token_owner,
        )

    @property
    def num_segments(self) -> int:
        return int(self.seg_length.size)

    @property
    def packed_tokens(self) -> int:
        return int(self.seg_length.sum())


def _int_array(value: Any, field: str, *, width: int | None = None) -> np.ndarray:
    """A list (of ``width``-lists) of integers as an int64 array, or an InputError naming ``field``."""
    try:
        array = np.array(value, dtype=np.int64)
        ok = isinstance(value, list) and array.ndim == (1 if width is None else 2)
        ok = ok and (width is None or array.shape[1] == width)
        if isinstance(value, list) and not value:
            array, ok = np.zeros((0, width) if width else 0, dtype=np.int64), True
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        shape = "a list of integers" if width is None else f"a list of [{', '.join(['int'] * width)}]"
        raise InputError(f"must be {shape}", field=field)
    return array


def _topology_cp(data: dict[str, Any]) -> int:
    topology = data.get("topology")
    cp = topology.get("cp") if isinstance(topology, dict) else None
    if not isinstance(cp, int) or isinstance(cp, bool) or cp < 1:
        raise InputError("must give a positive integer cp", field="topology.cp")
    return cp


def _owners_from_ranges(ranks: Any, num_ranks: int, packed_tokens: int, where: str) -> np.ndarray:
    """Every packed token's rank from the ranks' owned ``ranges``; each token owned exactly once."""
    if not isinstance(ranks, list) or len(ranks) != num_ranks:
        raise InputError(f"must list the {num_ranks} CP ranks", field=f"{where}.ranks")
    owner = np.full(packed_tokens, -1, dtype=np.int64)
    cover = np.zeros(packed_tokens + 1, dtype=np.int64)
    for r, entry in enumerate(ranks):
        at = f"{where}.ranks[{r}].ranges"
        ranges = _int_array(entry.get("ranges") if isinstance(entry, dict) else None, at, width=2)
        lo, hi = ranges.T if ranges.size else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        if ((lo < 0) | (hi > packed_tokens) | (lo >= hi)).any():
            raise InputError(f"ranges must be [start, end) within [0, {packed_tokens}]", field=at)
        np.add.at(cover, lo, 1)
        np.add.at(cover, hi, -1)
        mark = np.zeros(packed_tokens + 1, dtype=np.int64)
        np.add.at(mark, lo, 1)
        np.add.at(mark, hi, -1)
        owner[np.cumsum(mark)[:-1] > 0] = r
    count = np.cumsum(cover)[:-1]
    bad = np.flatnonzero(count != 1)
    if bad.size:
        token = int(bad[0])
        how = "no rank" if count[token] == 0 else f"{int(count[token])} ranks"
        raise InputError(f"packed token {token} is owned by {how}", field=f"{where}.ranks")
    return owner


def _load_plan(plan: PlanLike) -> tuple[Plan | None, dict[str, Any] | None, int]:
    """The plan object or its JSON dictionary, and its number of waves."""
    if isinstance(plan, PlanResult):
        plan = plan.plan
    if isinstance(plan, Plan):
        return plan, None, plan.num_waves
    if isinstance(plan, str | Path):
        try:
            plan = json.loads(Path(plan).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read plan: {exc.strerror}", file=str(plan)) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"malformed JSON: {exc.msg} (line {exc.lineno})", file=str(plan)) from None
    if not isinstance(plan, dict):
        raise InputError(f"expected a Plan, PlanResult or plan JSON, got {type(plan).__name__}", field="plan")
    waves = plan.get("waves")
    if not isinstance(waves, list) or not all(isinstance(w, dict) for w in waves):
        raise InputError("must be a list of wave objects", field="waves")
    return None, plan, len(waves)


@dataclass(frozen=True, kw_only=True, eq=False)
class _WaveData:
    """Whole-wave arrays every rank's batch is cut from."""

    wave: int
    source: _WaveSource
    flat_tokens: np.ndarray
    request_base: np.ndarray
    segment_ids: np.ndarray
    seg_loss_count: np.ndarray
    requests: tuple[tuple[str, int], ...]
    tensors: dict[str, torch.Tensor]

    @property
    def num_ranks(self) -> int:
        return self.source.num_ranks

    @classmethod
    def build(cls, plan: PlanLike, workload: Workload, wave: int) -> _WaveData:
        plan_object, plan_json, num_waves = _load_plan(plan)
        if isinstance(wave, bool) or not isinstance(wave, int | np.integer) or not 0 <= wave < num_waves:
            raise InputError(f"wave {wave!r} is out of range: the plan has {num_waves} waves", field="wave")
        item_ptr = np.cumsum([0, *(len(item.requests) for item in workload.items)])
        num_requests = int(item_ptr[-1])
        if plan_object is not None:
            source = _WaveSource.from_wave_plan(plan_object.waves[int(wave)])
        else:
            source = _WaveSource.from_json(plan_json, int(wave), workload, item_ptr)
        if source.request_ids.size and int(source.request_ids.max()) >= num_requests:
            raise InputError(
                f"wave {wave} reads request {int(source.request_ids.max())} but the workload has only "
                f"{num_requests} requests: is this the workload the plan was made for?",
                file=workload.source,
                field="workload",
            )
        wave_requests = source.request_ids.tolist()
        item_of = dict(
            zip(
                wave_requests,
                (np.searchsorted(item_ptr, wave_requests, side="right") - 1).tolist(),
                strict=True,
            )
        )
        index_of = {r: r - int(item_ptr[i]) for r, i in item_of.items()}
        sequences = {r: workload.items[i].requests[index_of[r]].tokens for r, i in item_of.items()}
        _check_chains(source, sequences, item_of, index_of, workload, int(wave))
        # Token ids of every request a segment is copied from, in one flat array.
        srcs = np.unique(source.seg_src)
        lengths = np.array([sequences[s].size for s in srcs.tolist()], dtype=np.int64)
        request_base = np.zeros(num_requests, dtype=np.int64)
        request_base[srcs] = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if srcs.size else srcs
        flat_tokens = (
            np.concatenate([sequences[s] for s in srcs.tolist()]) if srcs.size else np.zeros(0, np.int64)
        )
        seg_length = source.seg_length
        segment_ids = np.repeat(np.arange(source.num_segments, dtype=np.int64), seg_length)
        assert source.token_owner.size == segment_ids.size
        chain_lengths = np.diff(source.request_ptr)
        outputs = [workload.items[item_of[r]].requests[index_of[r]].output for r in wave_requests]
        is_loss = np.array([o == "loss" for o in outputs], dtype=np.float64)
        seg_loss_count = np.bincount(
            source.request_segments, weights=np.repeat(is_loss, chain_lengths), minlength=source.num_segments
        ).astype(np.int64)
        readback_index, readback_ptr = _readback(source)
        within = np.arange(segment_ids.size) - source.seg_offset[segment_ids]
        src = source.seg_src[segment_ids]
        packed_ids = flat_tokens[request_base[src] + source.seg_position[segment_ids] + within]
        _check_tokens(
            packed_ids, readback_index, readback_ptr, source, sequences, item_of, index_of, workload
        )
        parent_ids = np.repeat(source.seg_parent, seg_length)
        import torch  # here, not at module level: `import cpplan` stays light for the planner and CLI

        tensors = {
            "segment_ids": torch.from_numpy(segment_ids),
            "parent_ids": torch.from_numpy(parent_ids),
            "token_owner": torch.from_numpy(source.token_owner.copy()),
            "seg_parent": torch.from_numpy(source.seg_parent.copy()),
            "seg_offset": torch.from_numpy(source.seg_offset.copy()),
            "seg_length": torch.from_numpy(seg_length.copy()),
            "seg_position": torch.from_numpy(source.seg_position.copy()),
            "readback_index": torch.from_numpy(readback_index),
            "readback_ptr": torch.from_numpy(readback_ptr),
        }
        return cls(
            wave=int(wave),
            source=source,
            flat_tokens=flat_tokens,
            request_base=request_base,
            segment_ids=segment_ids,
            seg_loss_count=seg_loss_count,
            requests=tuple((workload.items[item_of[r]].id, index_of[r]) for r in wave_requests),
            tensors=tensors,
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
        loss_index, loss_targets, loss_weights = self._loss_pairs(rank, packed_index, segments, within)
        breaks = np.flatnonzero(np.diff(packed_index) != 1) + 1
        starts = packed_index[np.r_[0, breaks]] if packed_index.size else packed_index
        ends = (
            packed_index[np.r_[breaks - 1, packed_index.size - 1]] + 1 if packed_index.size else packed_index
        )
        ranges = tuple(zip(starts.tolist(), ends.tolist(), strict=True))
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
        )

    def _loss_pairs(
        self, rank: int, packed_index: np.ndarray, segments: np.ndarray, within: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        layout = self.source
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
        mine = layout.token_owner[last] == rank
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


def _check_chains(source: _WaveSource, sequences, item_of, index_of, workload: Workload, wave: int) -> None:
    """Each request's chain must run parent to child from a root, start at position 0, be contiguous
    and cover the request (a segment is copied from a request whose chain holds it, so its span is
    then in bounds too)."""
    segs = source.request_segments
    starts_at = source.request_ptr[:-1]
    totals = np.add.reduceat(source.seg_length[segs], starts_at)
    expected = np.array([sequences[r].size for r in source.request_ids.tolist()], dtype=np.int64)
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
        r = int(source.request_ids[k])
        item = workload.items[item_of[r]]
        problem = (
            f"has {sequences[r].size} tokens, but the plan's segment chain reads {int(totals[k])}"
            if totals[k] != expected[k]
            else "has a segment chain that is not a root-to-leaf run of contiguous segments"
        )
        raise InputError(
            f"wave {wave} does not match the workload: item {item.id!r} request {index_of[r]} {problem}; "
            "is this the workload the plan was made for?",
            file=workload.source,
            field=f"items[{item_of[r]}].requests[{index_of[r]}]",
        )


def _check_tokens(
    packed_ids, readback_index, readback_ptr, source: _WaveSource, sequences, item_of, index_of, workload
) -> None:
    """Every request read back from the packed ids must be its own tokens: the plan keeps no token ids,
    so this is what catches a workload that is not the one planned (or a plan file whose shared
    segments are not shared prefixes)."""
    own = np.concatenate([sequences[r] for r in source.request_ids.tolist()])
    wrong = np.flatnonzero(packed_ids[readback_index] != own)
    if wrong.size:
        k = int(np.searchsorted(readback_ptr, wrong[0], side="right") - 1)
        r = int(source.request_ids[k])
        position = int(wrong[0] - readback_ptr[k])
        raise InputError(
            f"the plan's segments give token {position} of item {workload.items[item_of[r]].id!r} request "
            f"{index_of[r]} as {int(packed_ids[readback_index[wrong[0]]])}, but the workload has "
            f"{int(own[wrong[0]])}; is this the workload the plan was made for?",
            file=workload.source,
            field=f"items[{item_of[r]}].requests[{index_of[r]}].tokens",
        )


def _readback(layout) -> tuple[np.ndarray, np.ndarray]:
    """Every request's packed positions, concatenated in wave order, and the offsets between them."""
    segs = layout.request_segments
    lengths = layout.seg_length[segs]
    per_request = np.add.reduceat(lengths, layout.request_ptr[:-1]) if segs.size else lengths
    ptr = np.concatenate([[0], np.cumsum(per_request)]).astype(np.int64)
    return chain_positions(layout.seg_offset, layout.seg_length, segs), ptr


__all__ = ["RankBatch", "materialize", "materialize_wave"]
