"""Every wave of a step's plan run packed, as one differentiable result: what a trainer that computes
its loss over the whole step at once (TRL's GRPO) needs from cpplan.

Under FSDP2 every process all-gathers each layer's parameters in each forward (and again in backward),
so every process of the sharding group must run the same number of forwards and backwards per pass.
Processes that plan their own batches get different wave counts: :func:`agreed_num_waves` takes the
largest over the group, and ``step_logprobs(..., num_waves=...)`` runs the missing ones as padding waves
(:func:`cpplan.hf.padding_wave`) whose zero is part of the result's autograd graph, so their backward
runs the same module calls too.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from cpplan.hf.padding import padding_wave
from cpplan.hf.router_loss import RouterSums, recorded_router_logits, router_sums, wave_token_multiplicity
from cpplan.hf.wave_runner import packed_logprobs_and_entropies
from cpplan.spec.workload import Workload

Key = tuple[str, int]


def step_logprobs(
    model: torch.nn.Module,
    result,
    workload: Workload,
    *,
    num_waves: int | None = None,
    temperature: float = 1.0,
    kernels: str = "auto",
    recompute_waves: bool = True,
    router: bool = False,
) -> tuple[dict[Key, torch.Tensor], dict[Key, torch.Tensor]] | tuple[dict, dict, RouterSums]:
    """Per request of the plan: its next-token log-probs and entropies (entries its loss mask counts;
    the others 0), every wave run packed in this process (all its CP ranks). ``num_waves`` (at least
    the plan's; default the plan's): the forwards to run, the plan's waves then padding waves, whose
    zero is added to one request's log-probs so that a backward runs them too (FSDP2: pass
    :func:`agreed_num_waves`). With gradients enabled, more than ``1`` of them and ``recompute_waves``,
    each wave (padding waves too) keeps only its outputs after its forward and runs again in backward,
    so one wave's activations exist at a time, as the plan priced them. With ``router`` (a
    mixture-of-experts model) a third value: the waves' router sums (:mod:`cpplan.hf.router_loss`), whose
    ``loss()`` is the load-balancing loss the padded batch of these requests gives."""
    planned = result.plan.num_waves
    total = planned if num_waves is None else num_waves
    if total < planned:
        raise ValueError(f"num_waves={num_waves} is fewer than the plan's {planned} waves")
    logprobs: dict[Key, torch.Tensor] = {}
    entropies: dict[Key, torch.Tensor] = {}
    sums: RouterSums | None = None
    recompute = recompute_waves and torch.is_grad_enabled() and total > 1
    for wave in range(planned):
        run = _WaveRun(model, result, workload, wave, temperature, kernels, router)
        found = checkpoint(run, use_reentrant=False) if recompute else run()
        keys, n = run.keys, len(run.keys)
        logprobs.update(zip(keys, found[:n], strict=True))
        entropies.update(zip(keys, found[n : 2 * n], strict=True))
        if router:
            step = RouterSums(*found[2 * n :])
            sums = step if sums is None else sums + step
    if total > planned:
        first = min(logprobs)
        logprobs[first] = logprobs[first] + padding_waves(model, total - planned, recompute=recompute)
    return (logprobs, entropies, sums) if router else (logprobs, entropies)


def agreed_num_waves(num_waves: int, *, group: dist.ProcessGroup | None = None, device=None) -> int:
    """The largest ``num_waves`` over the processes of ``group`` (default: the default group), all-reduced
    on ``device`` (a CUDA device under NCCL): what each process runs so that a wrapper collective in every
    forward (FSDP2) meets the same number of forwards on every process. Every process of the group must
    call it, in the same order."""
    count = torch.tensor(num_waves, dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
    return int(count)


def padding_waves(model: torch.nn.Module, count: int, *, recompute: bool) -> torch.Tensor:
    """The zero scalar of ``count`` :func:`cpplan.hf.padding_wave` runs (each recomputed in backward if
    ``recompute``, as the real waves are); a loss that depends on it runs their backward too."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    zeros = [
        checkpoint(padding_wave, model, use_reentrant=False) if recompute else padding_wave(model)
        for _ in range(count)
    ]
    return torch.stack(zeros).sum()


class _WaveRun:
    """One wave's packed forward as a function of nothing (so checkpoint can replay it): a tuple of
    the log-prob tensors then the entropy tensors, in :attr:`keys` order, then (with ``router``) the
    wave's three router sums."""

    def __init__(
        self, model, result, workload: Workload, wave: int, temperature: float, kernels: str, router
    ):
        self.args = (model, result, workload)
        self.options = {"wave": wave, "temperature": temperature, "kernels": kernels, "positions": "loss"}
        self.keys: list[Key] = []
        self.weights = torch.as_tensor(wave_token_multiplicity(result, workload, wave)) if router else None

    def __call__(self) -> tuple[torch.Tensor, ...]:
        model = self.args[0]
        with recorded_router_logits(model) if self.weights is not None else contextlib.nullcontext() as found:
            logprobs, entropies = packed_logprobs_and_entropies(*self.args, **self.options)
        self.keys = sorted(logprobs)
        out = (*(logprobs[k] for k in self.keys), *(entropies[k] for k in self.keys))
        return out if self.weights is None else (*out, *router_sums(found, self.weights).as_tensors())


__all__ = ["agreed_num_waves", "padding_waves", "step_logprobs"]
