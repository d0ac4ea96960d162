"""The MoE load-balancing loss of packed waves equals transformers' own on the padded batch of the same
requests (value and gradient), shared prompts counted once per request through them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cpplan
from cpplan.hf import float64_internals
from cpplan.hf.router_loss import router_modules
from cpplan.integrations.packed_step import step_logprobs
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload
from tests.support.hf_models import CARD, VOCAB, one_thread, tiny_model  # noqa: F401

FAMILIES = ("qwen3_5_moe", "qwen3_moe")


def _rows(seed: int) -> list[RolloutRow]:
    """Two prompts of three completions each, all of different lengths."""
    rng = np.random.default_rng(seed)
    rows = []
    for prompt_tokens in (23, 31):
        prompt = tuple(rng.integers(0, VOCAB, prompt_tokens).tolist())
        for completion_tokens in (5, 12, 9):
            rows.append(
                RolloutRow(
                    prompt=prompt, completion=tuple(rng.integers(0, VOCAB, completion_tokens).tolist())
                )
            )
    return rows


def _padded(rows: list[RolloutRow]) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's layout: left-padded prompts, right-padded completions, and the attention mask."""
    width_p = max(len(r.prompt) for r in rows)
    width_c = max(len(r.completion) for r in rows)
    ids = torch.zeros(len(rows), width_p + width_c, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for k, r in enumerate(rows):
        ids[k, width_p - len(r.prompt) : width_p] = torch.tensor(r.prompt)
        ids[k, width_p : width_p + len(r.completion)] = torch.tensor(r.completion)
        mask[k, width_p - len(r.prompt) : width_p + len(r.completion)] = 1
    return ids, mask


def _router_grads(model) -> torch.Tensor:
    return torch.cat([m.weight.grad.flatten() for m in router_modules(model)])


def _both_losses(family: str, dtype: torch.dtype, recompute: bool):
    """The model's own aux loss on the padded batch and the packed sums' loss over several waves, each
    with the routers' weight gradients."""
    torch.manual_seed(0)
    model = tiny_model(family, layers=2).to(dtype)
    model.config.use_cache = False
    rows = _rows(3)
    ids, mask = _padded(rows)
    stock = model(input_ids=ids, attention_mask=mask, output_router_logits=True).aux_loss
    stock.backward()
    expected = _router_grads(model).clone()
    model.zero_grad()
    workload, _ = grouped_workload(rows)
    result = cpplan.plan(workload, model=CARD, memory_bytes="5.55GiB", topology="cp=2")
    _, _, sums = step_logprobs(model, result, workload, router=True, recompute_waves=recompute)
    packed = sums.loss()
    packed.backward()
    assert result.plan.num_waves >= 2 and result.plan.packed_tokens < int(mask.sum())
    assert float(stock.detach()) > 0 and float(expected.abs().max()) > 0
    return stock.detach(), packed.detach(), expected, _router_grads(model)


@pytest.mark.parametrize("family", FAMILIES)
def test_packed_router_loss_equals_the_padded_batchs(family):
    """Over several waves (a budget that splits the step) on two CP ranks, shared prompts stored once,
    the packed sums' loss equals the model's own ``aux_loss`` on the padded batch to 1e-12, and so do
    the routers' weight gradients (float64, float64 internals, waves not recomputed)."""
    with float64_internals():
        stock, packed, expected, found = _both_losses(family, torch.float64, recompute=False)
    assert float(abs(packed - stock)) < 1e-12
    assert float((found - expected).abs().max()) < 1e-12


def test_recomputed_waves_give_the_same_router_loss():
    """With each wave recomputed in backward (the sums are the checkpointed wave's outputs), the loss
    and the routers' gradients still equal the padded batch's (float32: 1e-6)."""
    stock, packed, expected, found = _both_losses("qwen3_5_moe", torch.float32, recompute=True)
    assert float(abs(packed - stock)) < 1e-6
    assert float((found - expected).abs().max()) < 1e-6


def test_a_dense_model_has_no_routers():
    """A dense model records no router logits: asking for router sums is refused, not zero."""
    model = tiny_model("qwen3", layers=1).double()
    rows = _rows(1)[:2]
    workload, _ = grouped_workload(rows)
    result = cpplan.plan(workload, model=CARD, memory_bytes="40GiB")
    assert router_modules(model) == []
    with pytest.raises(ValueError, match="no router ran"):
        step_logprobs(model, result, workload, router=True)
