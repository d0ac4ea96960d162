"""How CP ranks exchange rows: in one process (simulated ranks) or across processes (torch.distributed).

Every exchange is a *publish*: each rank contributes the rows the others need from it (the row counts
per rank are known to every rank from the plan), and every rank receives all contributions concatenated
rank-major. Keys and values, conv tails, recurrent states and the final log-probabilities all travel
this way, so one primitive carries every hand-off and its backward.

Across processes a publish is a padded ``all_gather``; its backward is an ``all_reduce`` (sum) of the
gradient of the gathered rows, of which each rank keeps its own. The one other exchange is an
*all-to-all* (:meth:`SimulatedComm.all_to_all`): each rank sends each rank its own block of rows (the
head-parallel GDN layers' move from token shards to head shards and back, :mod:`cpplan.hf.gdn_heads`);
across processes one ``all_to_all_single``, whose backward is the all-to-all of the gradients the other
way. Every collective must be issued in the
same order on every rank, forward and backward. Forward order follows from the plan alone. Backward
order is forced: every publish also takes and returns an *ordering token* (a zero scalar), so the
autograd graph chains the publishes and the engine must run their backwards in exactly the reverse
order, on every rank, even where a rank uses none of the rows it received.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist


class SimulatedComm:
    """All CP ranks in this process: a publish is a concatenation (autograd does the rest)."""

    def __init__(self, num_ranks: int) -> None:
        self.num_ranks = num_ranks
        self.ranks = tuple(range(num_ranks))

    def publish(self, rows: dict[int, torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
        """All ranks' rows, rank-major."""
        for r in self.ranks:
            assert rows[r].shape[0] == counts[r], (r, rows[r].shape, counts[r])
        return torch.cat([rows[r] for r in self.ranks])

    def replicate(self, rows: dict[int, torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
        """Same as :meth:`publish` in one process."""
        return self.publish(rows, counts)

    def all_to_all(
        self, sends: dict[int, list[torch.Tensor]], shapes: dict[int, list[tuple[int, ...]]]
    ) -> dict[int, list[torch.Tensor]]:
        """``sends[s][d]``, the block rank ``s`` sends rank ``d``, as ``received[d][s]``; ``shapes[d][s]``
        is the shape rank ``d`` expects from rank ``s`` (checked here)."""
        received = {d: [sends[s][d] for s in self.ranks] for d in self.ranks}
        for d in self.ranks:
            for s in self.ranks:
                assert tuple(received[d][s].shape) == tuple(shapes[d][s]), (s, d, received[d][s].shape)
        return received


class ProcessGroupComm:
    """This process is CP rank ``dist.get_rank(group)`` of a group of ``num_ranks`` processes."""

    def __init__(self, num_ranks: int, group: dist.ProcessGroup | None = None) -> None:
        size = dist.get_world_size(group)
        if size != num_ranks:
            raise ValueError(f"the plan has {num_ranks} CP ranks but the process group has {size} processes")
        self.num_ranks = num_ranks
        self.group = group
        self.rank = dist.get_rank(group)
        self.ranks = (self.rank,)
        self.token = torch.zeros((), requires_grad=torch.is_grad_enabled())

    def publish(self, rows: dict[int, torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
        """All ranks' rows, rank-major; backward sums every rank's gradient of them."""
        return self._gather(rows[self.rank], counts, reduce_backward=True)

    def replicate(self, rows: dict[int, torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
        """All ranks' rows, for an output every rank then uses identically (each rank backpropagates
        the same loss): backward keeps the local gradient of this rank's rows, no communication."""
        return self._gather(rows[self.rank], counts, reduce_backward=False)

    def all_to_all(
        self, sends: dict[int, list[torch.Tensor]], shapes: dict[int, list[tuple[int, ...]]]
    ) -> dict[int, list[torch.Tensor]]:
        """This rank's blocks ``sends[rank][d]`` to every rank ``d`` (one ``all_to_all_single`` of their
        flattened concatenation), and the blocks every rank ``s`` sent it, of shapes
        ``shapes[rank][s]``; backward sends each received block's gradient back to its sender."""
        blocks = sends[self.rank]
        assert len(blocks) == self.num_ranks
        dtype = blocks[0].dtype
        flat = torch.cat([b.reshape(-1).to(dtype) for b in blocks])
        send_splits = tuple(b.numel() for b in blocks)
        recv_shapes = [tuple(shape) for shape in shapes[self.rank]]
        recv_splits = tuple(math.prod(shape) for shape in recv_shapes)
        token = self.token.to(dtype) if self.token.dtype != dtype else self.token
        out, self.token = _AllToAll.apply(flat, token, send_splits, recv_splits, self.group)
        parts = torch.split(out, list(recv_splits))
        return {self.rank: [p.reshape(shape) for p, shape in zip(parts, recv_shapes, strict=True)]}

    def _gather(self, local: torch.Tensor, counts: Sequence[int], *, reduce_backward: bool) -> torch.Tensor:
        token = self.token.to(local.dtype) if self.token.dtype != local.dtype else self.token
        gathered, self.token = _GatherRows.apply(
            local, token, tuple(counts), self.rank, self.group, reduce_backward
        )
        return gathered


class _GatherRows(torch.autograd.Function):
    """Padded all-gather of variable row counts, threading the ordering token through."""

    @staticmethod
    def forward(ctx, local, token, counts, rank, group, reduce_backward):
        ctx.counts, ctx.rank, ctx.group, ctx.reduce_backward = counts, rank, group, reduce_backward
        padded = local.new_zeros((max(counts), *local.shape[1:]))
        padded[: local.shape[0]] = local
        pieces = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(pieces, padded.contiguous(), group=group)
        return torch.cat([p[:n] for p, n in zip(pieces, counts, strict=True)]), token.clone()

    @staticmethod
    def backward(ctx, grad, grad_token):
        grad = grad.contiguous().clone()
        if ctx.reduce_backward:
            dist.all_reduce(grad, group=ctx.group)
        start = sum(ctx.counts[: ctx.rank])
        return grad[start : start + ctx.counts[ctx.rank]], grad_token, None, None, None, None


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` of a flat buffer with per-rank split sizes (elements), threading the
    ordering token through; backward is the same exchange of the gradients with the splits swapped."""

    @staticmethod
    def forward(ctx, flat, token, send_splits, recv_splits, group):
        ctx.send_splits, ctx.recv_splits, ctx.group = send_splits, recv_splits, group
        out = flat.new_empty(sum(recv_splits))
        dist.all_to_all_single(
            out,
            flat.contiguous(),
            output_split_sizes=list(recv_splits),
            input_split_sizes=list(send_splits),
            group=group,
        )
        return out, token.clone()

    @staticmethod
    def backward(ctx, grad, grad_token):
        back = grad.new_empty(sum(ctx.send_splits))
        dist.all_to_all_single(
            back,
            grad.contiguous(),
            output_split_sizes=list(ctx.send_splits),
            input_split_sizes=list(ctx.recv_splits),
            group=ctx.group,
        )
        return back, grad_token, None, None, None


def sum_gradients(model: torch.nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Sum every parameter gradient over the CP group (one all-reduce per parameter that has one).

    After each CP rank backpropagated the same loss of a :func:`cpplan.hf.packed_logprobs` run, each
    holds the gradient of its own tokens' share; the sum is the gradient of the whole wave."""
    for p in model.parameters():
        if p.requires_grad:
            if p.grad is None:  # every rank must join every all-reduce
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=group)


__all__ = ["ProcessGroupComm", "SimulatedComm", "sum_gradients"]
