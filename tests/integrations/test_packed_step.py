"""step_logprobs over a plan of several waves: the same log-probs, entropies and gradients as each
request run alone, with every wave recomputed in backward."""

from __future__ import annotations

import numpy as np
import torch

import cpplan
from cpplan.hf import unpacked_logprobs
from cpplan.integrations.packed_step import step_logprobs
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload
from tests.support.hf_models import VOCAB, gradients, max_abs_diff, max_rel_grad_diff, one_thread, tiny_model  # noqa: F401


def rows(seed: int) -> list[RolloutRow]:
    """Six prompts of 150-250 tokens, three completions of 20-60 tokens each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(6):
        prompt = tuple(rng.integers(0, VOCAB, int(rng.integers(150, 250))).tolist())
        for _ in range(3):
            out.append(
                RolloutRow(prompt=prompt, completion=tuple(rng.integers(0, VOCAB, int(rng.integers(20, 60)))))
            )
    return out


def test_several_waves_recomputed_equal_the_requests_alone():
    """With 6 GiB for the 35B card (about 1,100 tokens a wave) the step takes several waves; with waves
    recomputed in backward the completion log-probs and the gradient of their weighted sum equal each
    request run alone (to the float32 steps inside transformers' modules, run here without
    float64_internals: 1e-6 log-probs, 1e-5 relative gradients), and recomputation changes no gradient
    (1e-12); every wave's forward runs again in backward only when recomputed."""
    model = tiny_model("qwen3", layers=2)
    workload, _ = grouped_workload(rows(0))
    planner = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes="6GiB", solver="deterministic")
    result = planner.plan(workload)
    assert result.plan.num_waves > 1

    def loss_of(logprobs: dict) -> torch.Tensor:
        return sum((k + 1) * lp.sum() for k, (_, lp) in enumerate(sorted(logprobs.items())))

    calls = []
    model.model.embed_tokens.register_forward_hook(lambda *_: calls.append(1))
    packed, entropies = step_logprobs(model, result, workload, kernels="torch")
    forward_calls = len(calls)
    alone = unpacked_logprobs(model, workload)
    masks = {
        (item.id, k): torch.as_tensor(r.predicted(), dtype=torch.float64)
        for item in workload.items
        for k, r in enumerate(item.requests)
    }
    alone = {key: alone[key] * m for key, m in masks.items()}
    before_backward = len(calls)
    grads = gradients(model, loss_of(packed))
    recomputed = len(calls) - before_backward
    reference = gradients(model, loss_of(alone))
    plain, _ = step_logprobs(model, result, workload, kernels="torch", recompute_waves=False)
    before_backward = len(calls)
    plain_grads = gradients(model, loss_of(plain))
    assert forward_calls >= result.plan.num_waves and recomputed == forward_calls
    assert len(calls) == before_backward
    assert max_abs_diff(packed, alone) < 1e-6
    assert max_rel_grad_diff(grads, reference) < 1e-5
    assert max_abs_diff(grads, plain_grads) < 1e-12
    assert all(float(e.max()) > 0 for e in entropies.values())
