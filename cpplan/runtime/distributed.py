"""torch.distributed helpers: plan agreement across data-parallel ranks and the CP key/value all-gather
(one publish of :class:`~cpplan.runtime.comm.ProcessGroupComm`, put in packed order).

Every DP rank plans alone (with the ``deterministic`` solver profile) and must reach the same plan. Each
rank hashes its plan (:func:`plan_digest`) and one all-gather of the 32-byte digests lets every rank see
every other's (:func:`agree_on_plan`); all ranks then raise the same :class:`PlanMismatchError` together,
so no rank is left waiting in a later collective.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import torch
import torch.distributed as dist

from cpplan.errors import CpplanError
from cpplan.plans.plan import Plan
from cpplan.plans.result import PlanResult
from cpplan.runtime.comm import ProcessGroupComm
from cpplan.spec.workload import Workload

DIGEST_BYTES = 32


class PlanMismatchError(CpplanError):
    """Data-parallel ranks planned differently. ``ranks``: the ranks that disagree with the majority
    digest (with rank 0's on a tie); ``digests``: every rank's digest in hex."""

    def __init__(self, message: str, *, ranks: tuple[int, ...], digests: tuple[str, ...]) -> None:
        self.ranks = ranks
        self.digests = digests
        super().__init__(message)


def plan_digest(plan: Plan | PlanResult, workload: Workload | None = None) -> str:
    """SHA-256 (hex) of everything that decides what a rank runs: strategy, and per wave its items,
    layout, segments, request chains, chunk ownership and predicted cost. With ``workload``, its item
    ids and token ids too (two plans of the same shape over different tokens then differ)."""
    if isinstance(plan, PlanResult):
        plan = plan.plan
    h = hashlib.sha256()
    h.update(f"cpplan-plan-v1|{plan.strategy}|{plan.num_waves}".encode())
    if workload is not None:
        for item in workload.items:
            h.update(f"|item|{item.id}|{len(item.requests)}".encode())
            for request in item.requests:
                h.update(f"|{request.num_tokens}|{request.output}|{request.grad}|".encode())
                h.update(np.ascontiguousarray(request.tokens, dtype="<i8").tobytes())
    for wave in plan.waves:
        layout = wave.layout
        h.update(
            f"|wave|{wave.layout_name}|{wave.split}|{wave.stats.chunk_tokens}|{wave.cost_s.hex()}".encode()
        )
        for array in (
            np.asarray(wave.items, dtype=np.int64),
            layout.request_ids,
            layout.seg_parent,
            layout.seg_position,
            layout.seg_length,
            layout.seg_src,
            layout.request_ptr,
            layout.request_segments,
            wave.owner,
        ):
            array = np.ascontiguousarray(array, dtype="<i8")
            h.update(f"|{array.size}|".encode())
            h.update(array.tobytes())
    return h.hexdigest()


def agree_on_plan(
    plan: Plan | PlanResult, *, workload: Workload | None = None, group: dist.ProcessGroup | None = None
) -> str:
    """Confirm with one all-gather that every rank of ``group`` holds the same plan (and, given
    ``workload``, the same tokens); returns the digest.

    Raises :class:`PlanMismatchError` on every rank when the digests differ, naming the ranks (of
    ``group``) whose digest is not the majority's.
    """
    digest = plan_digest(plan, workload)
    local = torch.frombuffer(bytearray(bytes.fromhex(digest)), dtype=torch.uint8)
    world = dist.get_world_size(group)
    gathered = [torch.empty(DIGEST_BYTES, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(gathered, local, group=group)
    digests = tuple(bytes(t.tolist()).hex() for t in gathered)
    if len(set(digests)) == 1:
        return digest
    counts = Counter(digests)
    top = max(counts.values())
    agreed = digests[0] if counts[digests[0]] == top else next(d for d in digests if counts[d] == top)
    ranks = tuple(r for r, d in enumerate(digests) if d != agreed)
    agreeing = [r for r, d in enumerate(digests) if d == agreed]
    detail = ", ".join(f"rank {r} has {digests[r][:12]}" for r in ranks)
    raise PlanMismatchError(
        f"data-parallel ranks disagree on the plan: {detail}; ranks {agreeing} have {agreed[:12]} "
        f"(ranks {list(ranks)} planned differently: check their workload, model card, topology, memory "
        "and solver profile, and use the deterministic profile)",
        ranks=ranks,
        digests=digests,
    )


def kv_all_gather(batch, *, group: dist.ProcessGroup | None = None):
    """The exchange for :class:`~cpplan.runtime.reference_model.ReferenceLM` on CP rank ``batch.rank``: the
    ranks' local keys and values, all-gathered and put in packed order. Differentiable."""
    owner = batch.token_owner
    order = torch.argsort(owner, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())
    counts = torch.bincount(owner, minlength=batch.num_ranks).tolist()
    rank = dist.get_rank(group)
    if rank != batch.rank:
        raise ValueError(f"batch is for CP rank {batch.rank} but this process is rank {rank} of the group")

    comm = ProcessGroupComm(batch.num_ranks, group)

    def exchange(kv: torch.Tensor) -> torch.Tensor:
        return comm.publish({rank: kv}, counts)[inverse]

    return exchange


__all__ = ["PlanMismatchError", "agree_on_plan", "kv_all_gather", "plan_digest"]
