"""cpplan.hf on bf16 and fp32 models (as trainers run them, no float64 internals): for every supported
family, packed log-probs and gradients equal the unpacked run within the dtype's rounding, and packing
costs no accuracy: measured against the float64 truth (the same weights in float64 under
:func:`cpplan.hf.float64_internals`), the packed run is as close as the unpacked one.

Tolerances (CP 2, 128-token chunks dealt in a zigzag; measured maxima over the four families in
brackets): log-probs max abs diff bf16 1e-2 [2.9e-3], fp32 2e-6 [4.8e-7]; gradients, relative norm of
the difference over all parameters, bf16 3e-2 [9.7e-3], fp32 2e-6 [4.0e-7]; packed-to-truth at most
twice unpacked-to-truth plus the dtype's tolerance / 4.
"""

from __future__ import annotations

import pytest
import torch

from cpplan.hf import float64_internals, packed_logprobs, unpacked_logprobs
from tests.support.hf_models import gradients, mixed_workload, one_thread, plan, tiny_model, zigzag  # noqa: F401

FAMILIES = ("qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe")
TOLERANCES = {  # dtype: (log-prob max abs diff, gradient relative norm)
    torch.bfloat16: (1e-2, 3e-2),
    torch.float32: (2e-6, 2e-6),
}


@pytest.fixture(scope="module")
def wave():
    """A small mixed workload (GRPO groups, a prefix chain, a lone request) at CP 2, zigzag chunks."""
    workload = mixed_workload(0, scale=0.3)
    return workload, zigzag(plan(workload, 2), 2)


def _weighted(logprobs: dict) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for k, (_, lp) in enumerate(sorted(logprobs.items())):
        weights = torch.linspace(0.5, 1.5, lp.numel(), dtype=torch.float64) * (1 + 0.1 * k)
        total = total + (weights * lp.double()).sum()
    return total


def _run(model, workload, result=None) -> tuple[dict, torch.Tensor]:
    """Log-probs (detached) and all parameter gradients flattened into one float64 vector."""
    if result is None:
        logprobs = unpacked_logprobs(model, workload)
    else:
        logprobs = packed_logprobs(model, result, workload, wave=0)
    grads = gradients(model, _weighted(logprobs))
    flat = torch.cat([g.double().flatten() for g in grads.values()])
    return {k: v.detach() for k, v in logprobs.items()}, flat


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in b)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("dtype", list(TOLERANCES), ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("family", FAMILIES)
def test_low_precision_packed_equals_unpacked(wave, family, dtype):
    """A ``dtype`` model of ``family`` runs packed (its log-probs in float32, its gradients in
    ``dtype``); log-probs and gradients equal the unpacked run within the dtype's tolerance, and the
    packed run's distance to the float64 truth is no more than twice the unpacked run's."""
    workload, result = wave
    logprob_tol, grad_tol = TOLERANCES[dtype]
    model = tiny_model(family).to(dtype)
    packed, packed_grads = _run(model, workload, result)
    unpacked, unpacked_grads = _run(model, workload)
    assert all(v.dtype == torch.float32 for v in packed.values())
    assert all(p.grad.dtype == dtype for p in model.parameters() if p.grad is not None)
    truth_model = tiny_model(family).to(dtype).double()
    with float64_internals():
        truth, truth_grads = _run(truth_model, workload)
    assert _max_diff(packed, unpacked) <= logprob_tol
    assert _rel(packed_grads, unpacked_grads) <= grad_tol
    assert _max_diff(packed, truth) <= 2 * _max_diff(unpacked, truth) + logprob_tol / 4
    assert _rel(packed_grads, truth_grads) <= 2 * _rel(unpacked_grads, truth_grads) + grad_tol / 4
