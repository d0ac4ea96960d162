"""Every wave of a step's plan run packed, as one differentiable result: what a trainer that computes
its loss over the whole step at once (TRL's GRPO) needs from cpplan."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from cpplan.hf.wave_runner import packed_logprobs_and_entropies
from cpplan.spec.workload import Workload

Key = tuple[str, int]


def step_logprobs(
    model: torch.nn.Module,
    result,
    workload: Workload,
    *,
    temperature: float = 1.0,
    kernels: str = "auto",
    recompute_waves: bool = True,
) -> tuple[dict[Key, torch.Tensor], dict[Key, torch.Tensor]]:
    """Per request of the plan: its next-token log-probs and entropies (entries its loss mask counts;
    the others 0), every wave run packed in this process (all its CP ranks). With gradients enabled,
    more than one wave and ``recompute_waves``, each wave keeps only its outputs after its forward and
    runs again in backward, so one wave's activations exist at a time, as the plan priced them."""
    logprobs: dict[Key, torch.Tensor] = {}
    entropies: dict[Key, torch.Tensor] = {}
    recompute = recompute_waves and torch.is_grad_enabled() and result.plan.num_waves > 1
    for wave in range(result.plan.num_waves):
        run = _WaveRun(model, result, workload, wave, temperature, kernels)
        found = checkpoint(run, use_reentrant=False) if recompute else run()
        keys = run.keys
        logprobs.update(zip(keys, found[: len(keys)], strict=True))
        entropies.update(zip(keys, found[len(keys) :], strict=True))
    return logprobs, entropies


class _WaveRun:
    """One wave's packed forward as a function of nothing (so checkpoint can replay it): a tuple of
    the log-prob tensors then the entropy tensors, in :attr:`keys` order."""

    def __init__(self, model, result, workload: Workload, wave: int, temperature: float, kernels: str):
        self.args = (model, result, workload)
        self.options = {"wave": wave, "temperature": temperature, "kernels": kernels, "positions": "loss"}
        self.keys: list[Key] = []

    def __call__(self) -> tuple[torch.Tensor, ...]:
        logprobs, entropies = packed_logprobs_and_entropies(*self.args, **self.options)
        self.keys = sorted(logprobs)
        return (*(logprobs[k] for k in self.keys), *(entropies[k] for k in self.keys))


__all__ = ["step_logprobs"]
