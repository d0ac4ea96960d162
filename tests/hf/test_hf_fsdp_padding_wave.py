"""``cpplan.hf.padding_wave`` in one process: a padding wave gives every parameter a real wave trains a
gradient of exactly zero (so the wrappers' collectives see the same parameters) and calls the same
modules as a real wave (so FSDP2's and DDP's hooks fire), for every supported family, in float64 and
bf16, and leaves the model as it was."""

from __future__ import annotations

import contextlib

import pytest
import torch

from cpplan.hf import float64_internals, packed_logprobs, padding_wave
from cpplan.hf.decoder_routing import adapt
from tests.support.hf_models import (
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    tiny_model,
)

FAMILIES = ("qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe")


@pytest.fixture(scope="module")
def wave():
    """A CP2 plan of the mixed test workload: its first wave is the real wave compared against."""
    workload = mixed_workload(0)
    return plan(workload, 2), workload


def _model(family: str, dtype: torch.dtype) -> torch.nn.Module:
    return tiny_model(family).to(dtype).train()


def _real_wave_backward(model, wave) -> None:
    result, workload = wave
    exact = model.dtype == torch.float64
    with float64_internals() if exact else contextlib.nullcontext():
        logprobs = packed_logprobs(model, result, workload, wave=0)
        sum(v.sum() for v in logprobs.values()).backward()


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("family", FAMILIES)
def test_padding_adds_exactly_zero_to_the_gradients_a_real_wave_gives(wave, family, dtype):
    """After a real wave's backward, a padding wave's backward leaves every gradient bitwise unchanged,
    and its loss is 0; on a fresh model the padding wave alone gives exactly the parameters a real wave
    gives gradients a gradient (all of them, every entry 0), so FSDP2's reduce-scatters and DDP's
    all-reduce cover the same parameters on a padded GPU as on a busy one."""
    model = _model(family, dtype)
    _real_wave_backward(model, wave)
    real = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    loss = padding_wave(model)
    assert loss.shape == () and float(loss.detach()) == 0.0
    loss.backward()
    after = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert after.keys() == real.keys()
    assert all(torch.equal(after[name], real[name]) for name in real)

    fresh = _model(family, dtype)
    padding_wave(fresh).backward()
    padded = {name: p.grad for name, p in fresh.named_parameters() if p.grad is not None}
    assert padded.keys() == real.keys() == {name for name, _ in fresh.named_parameters()}
    assert all(not g.any() for g in padded.values())


def _called_modules(model, run) -> set[str]:
    """The names of the modules called (as modules) while ``run()`` runs."""
    called, handles = set(), []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(lambda m, a, n=name: called.add(n)))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return called


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_5_moe"])
def test_padding_calls_every_module_a_real_wave_calls_outside_mixers_and_mlps(wave, family):
    """The modules a padding wave calls are exactly those a real wave calls, less the insides of the
    token mixers and MLP/MoE blocks (which it replaces by a touch of their parameters: no CP collective,
    no expert routing): the causal LM, the decoder stack, the embedding, every decoder layer, its norms,
    mixer and MLP, the final norm and the LM head, wherever a wrapper's hooks may sit."""
    model = _model(family, torch.float64)
    real = _called_modules(model, lambda: _real_wave_backward(model, wave))
    padded = _called_modules(model, lambda: padding_wave(model).backward())
    lm = adapt(model)
    names = {module: name for name, module in model.named_modules()}
    blocks = [names[b] for layer in lm.layers for b in (layer.mixer, layer.mlp)]
    inside = {n for n in real if any(n.startswith(f"{b}.") for b in blocks)}
    assert inside, "the real wave calls modules inside the mixers and MLPs"
    assert padded == real - inside
    assert {"", "model", "model.embed_tokens", "model.norm", "lm_head"} <= padded
    assert {names[layer.module] for layer in lm.layers} <= padded


def test_the_model_is_unchanged_and_checkpointing_stays_on(wave):
    """A padding wave leaves no instance attribute behind (the forwards and the layers' checkpointing
    flags are the class's or the model's own again), also on a model with transformers' gradient
    checkpointing enabled, whose real waves then still match the unpadded run."""
    model = _model("qwen3_5_moe", torch.float64)
    model.gradient_checkpointing_enable()
    before = {name: dict(vars(m)) for name, m in model.named_modules()}
    padding_wave(model).backward()
    after = {name: dict(vars(m)) for name, m in model.named_modules()}
    assert after.keys() == before.keys()
    assert all(after[n].keys() == before[n].keys() for n in before)
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    assert all("forward" not in vars(m) for m in model.modules())
