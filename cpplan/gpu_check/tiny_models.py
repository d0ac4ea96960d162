"""Tiny random transformers models, prefix-tree workloads and the exactness measures the GPU check and
the tests share: no weights are downloaded, every model is built from a config."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cpplan.spec.workload import Item, Request, Workload

VOCAB = 64
FAMILIES = ("qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe")


def tiny_config(family: str, *, layers: int = 4, gdn_head_dim: int = 8) -> Any:
    """The transformers config of a tiny model of ``family``: hidden 32, ``layers`` layers, 4 experts
    top-2 for MoE models, a vocabulary of 64. Hybrids have GDN heads of ``gdn_head_dim`` and Qwen3.5's
    layer pattern, full attention every 4th layer (3 GDN + 1 attention per 4), with 2 or 3 layers in
    the last one (2 layers: one GDN, one attention), so that every hybrid of 2 layers or more runs both
    kinds (1 layer: one GDN layer)."""
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    common = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": layers, "num_attention_heads": 4}
    common |= {"num_key_value_heads": 2, "head_dim": 16}
    moe = {"moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}
    gdn = {"linear_key_head_dim": gdn_head_dim, "linear_value_head_dim": gdn_head_dim}
    gdn |= {"linear_num_key_heads": 2, "linear_num_value_heads": 4}
    period = max(2, min(4, layers))
    gdn["layer_types"] = [
        "full_attention" if (k + 1) % period == 0 else "linear_attention" for k in range(layers)
    ]
    configs = {
        "qwen3": ("Qwen3Config", {"intermediate_size": 48}),
        "qwen3_moe": ("Qwen3MoeConfig", moe | {"intermediate_size": 48}),
        "qwen3_5": ("Qwen3_5TextConfig", gdn | {"intermediate_size": 48}),
        "qwen3_5_moe": ("Qwen3_5MoeTextConfig", gdn | moe | {"shared_expert_intermediate_size": 16}),
    }
    name, extra = configs[family]
    config = getattr(transformers, name)(**common, **extra)
    config._experts_implementation = "eager"  # grouped_mm refuses float64
    return config


def tiny_model(
    family: str,
    *,
    seed: int = 0,
    layers: int = 4,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    gdn_head_dim: int = 8,
) -> torch.nn.Module:
    """A random model of one family (:func:`tiny_config`) in ``dtype`` on ``device``, in eval mode; the
    same ``seed`` gives the same weights whatever the dtype (initialised in float32, then cast)."""
    import transformers

    config = tiny_config(family, layers=layers, gdn_head_dim=gdn_head_dim)
    model_class = {
        "qwen3": "Qwen3ForCausalLM",
        "qwen3_moe": "Qwen3MoeForCausalLM",
        "qwen3_5": "Qwen3_5ForCausalLM",
        "qwen3_5_moe": "Qwen3_5MoeForCausalLM",
    }[family]
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config)
    return model.to(device=device, dtype=dtype).eval()


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, VOCAB, n).tolist()


def mixed_workload(seed: int = 0, *, scale: float = 1.0) -> Workload:
    """GRPO groups (a shared system prompt, two prompts with three completions each), a multi-turn
    chain whose requests are prefixes of each other, an exact duplicate, and a lone request; a few
    hundred tokens per request at ``scale`` 1 so that CP ranks split segments."""
    rng = np.random.default_rng(seed)

    def n(low: int, high: int) -> int:
        return max(2, int(rng.integers(low, high) * scale))

    system = _tokens(rng, n(100, 160))
    items = []
    for p in range(2):
        prompt = system + _tokens(rng, n(150, 250))
        group = [Request(tokens=prompt + _tokens(rng, n(60, 200))) for _ in range(3)]
        items.append(Item(id=f"grpo{p}", requests=tuple(group)))
    turns = [_tokens(rng, n(200, 300))]
    for _ in range(2):
        turns.append(turns[-1] + _tokens(rng, n(150, 250)))
    chain = [Request(tokens=t) for t in turns] + [Request(tokens=turns[1])]
    items.append(Item(id="chain", requests=tuple(chain)))
    items.append(Item(id="lone", requests=(Request(tokens=_tokens(rng, n(250, 400))),)))
    return Workload(items=tuple(items))


def weighted_sum(logprobs: dict) -> torch.Tensor:
    """A scalar touching every log-prob with a distinct weight (so gradients see every entry), in
    float64 whatever the log-probs' dtype."""
    first = next(iter(logprobs.values()))
    total = torch.zeros((), dtype=torch.float64, device=first.device)
    for k, (_, lp) in enumerate(sorted(logprobs.items())):
        weights = torch.linspace(0.5, 1.5, lp.numel(), dtype=torch.float64, device=lp.device) * (1 + 0.1 * k)
        total = total + (weights * lp.to(torch.float64)).sum()
    return total


def gradients(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every parameter's gradient of ``loss`` (zeros where it has none)."""
    model.zero_grad()
    loss.backward()
    return {
        n: (p.grad if p.grad is not None else torch.zeros_like(p)).clone()
        for n, p in model.named_parameters()
    }


def max_abs_diff(a: dict, b: dict) -> float:
    """Largest absolute difference over matching tensors of two dicts with the same keys."""
    assert a.keys() == b.keys()
    return max(
        float((a[k].double() - b[k].double()).detach().abs().max()) if a[k].numel() else 0.0 for k in a
    )


def max_rel_grad_diff(a: dict, b: dict) -> float:
    """Largest per-parameter ``max|a - b| / max|b|`` (parameters whose reference gradient is zero must
    match exactly)."""
    worst = 0.0
    for name, ref in b.items():
        scale = float(ref.double().abs().max())
        diff = float((a[name].double() - ref.double()).abs().max())
        worst = max(worst, diff / scale if scale else (0.0 if diff == 0 else float("inf")))
    return worst


def rel_l2_diff(a: dict, b: dict) -> float:
    """``||a - b|| / ||b||`` over all tensors of the two dicts taken as one vector (0 when both are 0)."""
    assert a.keys() == b.keys()
    diff = sum(float((a[k].double() - b[k].double()).square().sum()) for k in a)
    ref = sum(float(b[k].double().square().sum()) for k in b)
    if ref == 0:
        return 0.0 if diff == 0 else float("inf")
    return (diff / ref) ** 0.5


__all__ = [
    "FAMILIES",
    "VOCAB",
    "gradients",
    "max_abs_diff",
    "max_rel_grad_diff",
    "mixed_workload",
    "rel_l2_diff",
    "tiny_config",
    "tiny_model",
    "weighted_sum",
]
