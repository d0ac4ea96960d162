"""A wave runs through the model's own module calls (what lets FSDP2's and DDP's hooks fire), and leaves
the model exactly as it was: no forward override or flag survives the call, even one that raises."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from cpplan.hf import float64_internals, packed_logprobs, unpacked_logprobs
from cpplan.hf.module_calls import replaced_attributes
from tests.support.hf_models import (
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    tiny_model,
    weighted_sum,
)


@pytest.fixture(scope="module")
def wave():
    """A small mixed workload planned at CP 2."""
    workload = mixed_workload(0, scale=0.3)
    return workload, plan(workload, 2)


def _named_modules(model) -> dict[str, torch.nn.Module]:
    inner = model.model
    named = {"root": model, "stack": inner, "embed": inner.embed_tokens, "norm": inner.norm}
    named["head"] = model.lm_head
    for i, layer in enumerate(inner.layers):
        named[f"layer{i}"] = layer
        named[f"mixer{i}"] = getattr(layer, "linear_attn", None) or layer.self_attn
        named[f"mlp{i}"] = layer.mlp
    return named


def test_every_module_is_called_through_its_hooks(wave):
    """Forward pre-hooks on the causal LM, its decoder stack, the embedding, every decoder layer, token
    mixer and MLP, the final norm and the LM head fire: each module is called once per wave (the head
    once per logits chunk), as a wrapper's hooks would see it."""
    workload, result = wave
    model = tiny_model("qwen3_5_moe")
    calls: Counter = Counter()
    for name, module in _named_modules(model).items():
        module.register_forward_pre_hook(lambda *_, name=name: calls.update([name]))
    packed_logprobs(model, result, workload, wave=0)
    assert set(calls) == set(_named_modules(model))
    assert all(n == 1 for name, n in calls.items() if name != "head")
    assert calls["head"] >= 1


def test_model_is_unchanged_after_a_wave(wave):
    """After a wave, and after one that raised inside a decoder layer, no module holds an instance
    ``forward`` or ``gradient_checkpointing`` it did not hold before; a forward set on the instance
    beforehand (accelerate's hooks do this) is put back; the model's own forward gives its logits."""
    workload, result = wave
    model = tiny_model("qwen3_5")
    tokens = torch.tensor(workload.items[0].requests[0].tokens)[None]
    before = model(input_ids=tokens).logits
    own = model.model.norm.forward
    model.model.norm.__dict__["forward"] = own
    snapshot = {n: dict(m.__dict__) for n, m in model.named_modules()}
    packed_logprobs(model, result, workload, wave=0)
    layer = model.model.layers[1]
    layer.mlp.register_forward_pre_hook(lambda *_: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        packed_logprobs(model, result, workload, wave=0)
    layer.mlp._forward_pre_hooks.clear()
    for name, module in model.named_modules():
        for attribute in ("forward", "gradient_checkpointing"):
            assert module.__dict__.get(attribute) is snapshot[name].get(attribute), (name, attribute)
    assert model.model.norm.__dict__["forward"] is own
    torch.testing.assert_close(model(input_ids=tokens).logits, before, rtol=0, atol=0)


def test_transformers_gradient_checkpointing_is_off_for_the_wave(wave):
    """With transformers' gradient checkpointing enabled (train mode), the packed log-probs and
    gradients still equal the unpacked run (its recomputation would otherwise replay the layers with
    transformers' own mixers), and every decoder layer is still set to checkpoint afterwards. (The
    reference runs without checkpointing: transformers' recomputation does not see float64_internals.)"""
    workload, result = wave
    model = tiny_model("qwen3_5_moe").train()
    with float64_internals():
        want = unpacked_logprobs(model, workload)
        want_grads = gradients(model, weighted_sum(want))
        model.gradient_checkpointing_enable()
        logprobs = packed_logprobs(model, result, workload, wave=0)
        grads = gradients(model, weighted_sum(logprobs))
    assert max_abs_diff(logprobs, want) <= 1e-9
    assert max_rel_grad_diff(grads, want_grads) <= 1e-8
    assert all(layer.gradient_checkpointing for layer in model.model.layers)


def test_replaced_attributes_restores_in_reverse():
    """Two overrides of the same attribute unwind in reverse: the instance's original value returns."""
    module = torch.nn.Linear(2, 2)
    module.__dict__["flag"] = "original"
    with replaced_attributes([(module, "flag", "a"), (module, "flag", "b")]):
        assert module.flag == "b"
    assert module.flag == "original"
