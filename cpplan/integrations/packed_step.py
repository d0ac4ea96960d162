"""Every wave of a step's plan run packed, as one differentiable result: what a trainer that computes
its loss over the whole step at once (TRL's GRPO) needs from cpplan.

Under FSDP2 every process all-gathers each layer's parameters in each forward (and again in backward),
so every process of the sharding group must run the same number of forwards and backwards per pass.
Processes that plan their own batches get different wave counts: :func:`agreed_num_waves` takes the
largest over the group, and ``step_logprobs(..., num_waves=...)`` runs the missing ones as padding waves
(:func:`cpplan.hf.padding_wave`) whose zero is part of the result's autograd graph, so their backward
runs the same module calls too.

Each wave recomputed in backward is run in isolation (:func:`recomputed`): its first forward runs under
``torch.no_grad`` and the result's graph holds one node per wave; that node's backward runs the wave's
forward again and then that wave's whole backward at once (reentrant checkpointing). Every wave's
backward is therefore the same sequence of module calls on every process, whatever the wave holds, which
is what FSDP2 needs. ``torch.utils.checkpoint(..., use_reentrant=False)`` around each wave does not give
that: its recomputation starts at the first saved tensor autograd unpacks, which is the wave's first
backward node for a real wave (its read-back gathers) but comes only after the LM head's FSDP2
pre-backward hook (an unshard and a prefetch all-gather) for a padding wave (its zero saves no tensor
before the LM head), so a padded process's all-gathers go out of step with the others' (gloo: "Received
data size doesn't match expected size").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from cpplan.hf.decoder_routing import adapt
from cpplan.hf.padding import padding_wave
from cpplan.hf.router_loss import RouterSums, recorded_router_logits, router_sums, wave_token_multiplicity
from cpplan.hf.wave_runner import packed_logprobs, packed_logprobs_and_entropies
from cpplan.integrations.wave_meter import MeteredWave, WaveMeasurement, WaveMeter
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
    entropies: bool = True,
    meter: WaveMeter | None = None,
    record: Callable[[WaveMeasurement], None] | None = None,
) -> tuple[dict[Key, torch.Tensor], dict[Key, torch.Tensor]] | tuple[dict, dict, RouterSums]:
    """Per request of the plan: its next-token log-probs and entropies (entries its loss mask counts;
    the others 0), every wave run packed in this process (all its CP ranks). ``num_waves`` (at least
    the plan's; default the plan's): the forwards to run, the plan's waves then padding waves, whose
    zero is added to one request's log-probs so that a backward runs them too (FSDP2: pass
    :func:`agreed_num_waves`). With gradients enabled, more than ``1`` of them and ``recompute_waves``,
    each wave (padding waves too) keeps only its outputs after its forward and runs again in backward,
    wave by wave (:func:`recomputed`), so one wave's activations exist at a time, as the plan priced
    them; then backpropagate with ``.backward()`` (not ``torch.autograd.grad``). With ``router`` (a
    mixture-of-experts model) a third value: the waves' router sums (:mod:`cpplan.hf.router_loss`), whose
    ``loss()`` is the load-balancing loss the padded batch of these requests gives. With ``meter`` (and
    gradients enabled) each planned wave is measured, forward and backward
    (:class:`cpplan.integrations.wave_meter.MeteredWave`), and ``record`` gets its measurement once its
    backward is done."""
    planned = result.plan.num_waves
    total = planned if num_waves is None else num_waves
    if total < planned:
        raise ValueError(f"num_waves={num_waves} is fewer than the plan's {planned} waves")
    logprobs: dict[Key, torch.Tensor] = {}
    entropy_of: dict[Key, torch.Tensor] = {}
    sums: RouterSums | None = None
    recompute = recompute_waves and recomputes(total)
    embed = adapt(model).embed if meter is not None and torch.is_grad_enabled() else None
    for wave in range(planned):
        run = _WaveRun(model, result, workload, wave, temperature, kernels, router, entropies)
        if embed is not None:
            run = MeteredWave(run, wave=wave, meter=meter, record=record, embed=embed)
        found = recomputed(run, model) if recompute else run()
        keys, n = run.keys, len(run.keys)
        logprobs.update(zip(keys, found[:n], strict=True))
        read = 2 * n if entropies else n
        if entropies:
            entropy_of.update(zip(keys, found[n:read], strict=True))
        if router:
            step = RouterSums(*found[read:])
            sums = step if sums is None else sums + step
    if total > planned:
        first = min(logprobs)
        logprobs[first] = logprobs[first] + padding_waves(model, total - planned, recompute=recompute)
    return (logprobs, entropy_of, sums) if router else (logprobs, entropy_of)


def recomputes(num_waves: int) -> bool:
    """Whether a pass of ``num_waves`` forwards recomputes each in backward: with gradients enabled and
    more than one of them (what :func:`step_logprobs` does, and a process running only padding waves
    must do alike)."""
    return torch.is_grad_enabled() and num_waves > 1


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
        recomputed(lambda: padding_wave(model), model) if recompute else padding_wave(model)
        for _ in range(count)
    ]
    return torch.stack(zeros).sum()


def recomputed(function: Callable[[], tuple[torch.Tensor, ...] | torch.Tensor], model: torch.nn.Module):
    """``function()`` (a wave of ``model``: a tensor or a tuple of tensors) run under ``torch.no_grad``,
    its result made one node of the autograd graph whose backward runs ``function()`` again with
    gradients and then backpropagates through that run alone, before autograd goes on (reentrant
    ``torch.utils.checkpoint``, RNG and autocast state restored). The rerun also sees the torch function
    modes active now (such as :func:`cpplan.hf.float64_internals`; ``Tensor.backward`` leaves them
    otherwise). Each wave's backward is so the same module calls, in the same order, on every process of
    an FSDP2 group. The gradients reach the parameters as ``.grad`` (``loss.backward()``; reentrant
    checkpointing refuses ``torch.autograd.grad`` and ``backward(inputs=...)``)."""
    modes = torch.overrides._get_current_function_mode_stack()

    def rerun(_anchor: torch.Tensor):
        with _entered(modes):
            return function()

    # Reentrant checkpointing makes its outputs require grad only through an input that does.
    anchor = torch.zeros((), device=next(model.parameters()).device, requires_grad=True)
    return checkpoint(rerun, anchor, use_reentrant=True)


@contextmanager
def _entered(modes: list) -> Iterator[None]:
    """The torch function ``modes`` (outermost first) not active now, entered for the context."""
    active = torch.overrides._get_current_function_mode_stack()
    with ExitStack() as stack:
        for mode in modes:
            if all(mode is not other for other in active):
                stack.enter_context(mode)
        yield


class _WaveRun:
    """One wave's packed forward as a function of nothing (so checkpoint can replay it): a tuple of
    the log-prob tensors then (with ``entropies``) the entropy tensors, in :attr:`keys` order, then (with
    ``router``) the wave's three router sums."""

    def __init__(
        self,
        model,
        result,
        workload: Workload,
        wave: int,
        temperature: float,
        kernels: str,
        router,
        entropies,
    ):
        self.args = (model, result, workload)
        self.entropies = entropies
        self.options = {"wave": wave, "temperature": temperature, "kernels": kernels, "positions": "loss"}
        self.keys: list[Key] = []
        self.weights = torch.as_tensor(wave_token_multiplicity(result, workload, wave)) if router else None

    def __call__(self) -> tuple[torch.Tensor, ...]:
        model = self.args[0]
        with recorded_router_logits(model) if self.weights is not None else nullcontext() as found:
            if self.entropies:
                logprobs, entropies = packed_logprobs_and_entropies(*self.args, **self.options)
            else:
                logprobs, entropies = packed_logprobs(*self.args, **self.options), {}
        self.keys = sorted(logprobs)
        out = (*(logprobs[k] for k in self.keys), *(entropies[k] for k in self.keys if self.entropies))
        return out if self.weights is None else (*out, *router_sums(found, self.weights).as_tensors())


__all__ = ["agreed_num_waves", "padding_waves", "recomputed", "recomputes", "step_logprobs"]
