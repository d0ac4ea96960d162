"""Shared helpers for the cpplan.hf tests: tiny random transformers models, prefix-tree workloads and
plans (planned, or with chunks dealt to ranks in a zigzag), and exactness measurements."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import cpplan

VOCAB = 64
CARD = "qwen3.6-35b-a3b"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors on shared cores: one intra-op thread (more only spin against other processes)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model(family: str, *, seed: int = 0, layers: int = 4) -> torch.nn.Module:
    """A float64 random model of one family: hidden 32, 4 layers (hybrids: 3 GDN + 1 attention), 4
    experts top-2 for MoE models; no weights are downloaded."""
    import transformers

    common = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": layers, "num_attention_heads": 4}
    common |= {"num_key_value_heads": 2, "head_dim": 16}
    moe = {"moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}
    gdn = {"linear_key_head_dim": 8, "linear_value_head_dim": 8}
    gdn |= {"linear_num_key_heads": 2, "linear_num_value_heads": 4}
    configs = {
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"intermediate_size": 48}),
        "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", moe | {"intermediate_size": 48}),
        "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", gdn | {"intermediate_size": 48}),
        "qwen3_5_moe": (
            "Qwen3_5MoeTextConfig",
            "Qwen3_5MoeForCausalLM",
            gdn | moe | {"shared_expert_intermediate_size": 16},
        ),
    }
    config_name, model_name, extra = configs[family]
    config = getattr(transformers, config_name)(**common, **extra)
    config._experts_implementation = "eager"  # grouped_mm refuses float64
    torch.manual_seed(seed)
    return getattr(transformers, model_name)(config).double().eval()


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, VOCAB, n).tolist()


def mixed_workload(seed: int = 0, *, scale: float = 1.0) -> cpplan.Workload:
    """GRPO groups (a shared system prompt, two prompts with three completions each), a multi-turn
    chain whose requests are prefixes of each other, an exact duplicate, and a lone request; a few
    hundred tokens per request so that CP ranks split segments."""
    rng = np.random.default_rng(seed)

    def n(low: int, high: int) -> int:
        return max(2, int(rng.integers(low, high) * scale))

    system = _tokens(rng, n(100, 160))
    items = []
    for p in range(2):
        prompt = system + _tokens(rng, n(150, 250))
        group = [cpplan.Request(tokens=prompt + _tokens(rng, n(60, 200))) for _ in range(3)]
        items.append(cpplan.Item(id=f"grpo{p}", requests=tuple(group)))
    turns = [_tokens(rng, n(200, 300))]
    for _ in range(2):
        turns.append(turns[-1] + _tokens(rng, n(150, 250)))
    chain = [cpplan.Request(tokens=t) for t in turns] + [cpplan.Request(tokens=turns[1])]
    items.append(cpplan.Item(id="chain", requests=tuple(chain)))
    items.append(cpplan.Item(id="lone", requests=(cpplan.Request(tokens=_tokens(rng, n(250, 400))),)))
    return cpplan.Workload(items=tuple(items))


def random_tree_workload(seed: int, *, requests: int = 6, scale: int = 120) -> cpplan.Workload:
    """Requests branching off earlier ones at random cuts (sometimes a prefix of, or equal to, an
    earlier one), in one or two items."""
    rng = np.random.default_rng(seed)
    sequences: list[list[int]] = []
    for _ in range(requests):
        prefix: list[int] = []
        if sequences and rng.random() < 0.8:
            base = sequences[int(rng.integers(len(sequences)))]
            prefix = base[: int(rng.integers(1, len(base) + 1))]
        tail = _tokens(rng, int(rng.integers(0 if prefix else 2, scale)))
        sequences.append(prefix + tail)
    cut = int(rng.integers(1, requests + 1))
    groups = [sequences[:cut], sequences[cut:]]
    items = [
        cpplan.Item(id=f"t{k}", requests=tuple(cpplan.Request(tokens=s) for s in g))
        for k, g in enumerate(groups)
        if g
    ]
    return cpplan.Workload(items=tuple(items))


def completion_masks(item: cpplan.Item, k: int) -> np.ndarray:
    """A token mask for request ``k`` of ``item``: for GRPO items the tokens after the prompt its group
    shares, for the lone request its second half, every token otherwise."""
    tokens = [r.tokens for r in item.requests]
    mask = np.ones(tokens[k].size, dtype=np.int64)
    if item.id.startswith("grpo"):
        others = [o for j, o in enumerate(tokens) if j != k]
        t = tokens[k]
        mask[: max(int(np.argmin(np.r_[t[: o.size] == o[: t.size], False])) for o in others)] = 0
    elif item.id == "lone":
        mask[: tokens[k].size // 2] = 0
    return mask


def random_masks(seed: int):
    """Random token masks (runs of zeros and ones, some all zero) as a ``masks(item, k)`` function."""
    rng = np.random.default_rng(seed)
    return lambda item, k: np.cumsum(rng.random(item.requests[k].num_tokens) < 0.1) % 2


def with_loss_masks(workload: cpplan.Workload, masks) -> cpplan.Workload:
    """The workload with ``masks(item, k)`` as request ``k``'s ``loss_mask``."""
    return cpplan.Workload(
        items=tuple(
            cpplan.Item(
                id=item.id,
                requests=tuple(
                    cpplan.Request(tokens=r.tokens, grad=r.grad, output=r.output, loss_mask=masks(item, k))
                    for k, r in enumerate(item.requests)
                ),
            )
            for item in workload.items
        )
    )


def plan(workload: cpplan.Workload, cp: int) -> cpplan.PlanResult:
    """The deterministic planner's plan for Qwen3.6-35B-A3B at CP ``cp`` with a generous budget."""
    return cpplan.plan(
        workload,
        topology=cpplan.Topology(cp=cp),
        model=cpplan.load_model(CARD),
        memory_bytes=80 * 2**30,
        solver=cpplan.load_solver("deterministic"),
    )


def zigzag(result: cpplan.PlanResult, cp: int) -> cpplan.Plan:
    """The same waves with 128-token chunks dealt 0, 1, .., cp-1, cp-1, .., 0, 0, 1, ..: every rank owns
    several non-contiguous pieces and segments cross ranks many times."""
    waves = []
    for wave in result.plan.waves:
        pattern = np.r_[np.arange(cp), np.arange(cp)[::-1]]
        owner = pattern[np.arange(wave.owner.size) % pattern.size]
        waves.append(dataclasses.replace(wave, owner=owner.astype(wave.owner.dtype)))
    return cpplan.Plan(strategy="zigzag", waves=tuple(waves))


def weighted_sum(logprobs: dict) -> torch.Tensor:
    """A scalar touching every log-prob with a distinct weight (so gradients see every entry)."""
    total = torch.zeros((), dtype=torch.float64)
    for k, (_, lp) in enumerate(sorted(logprobs.items())):
        weights = torch.linspace(0.5, 1.5, lp.numel(), dtype=lp.dtype) * (1 + 0.1 * k)
        total = total + (weights * lp).sum()
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
    return max(float((a[k] - b[k]).detach().abs().max()) if a[k].numel() else 0.0 for k in a)


def max_rel_grad_diff(a: dict, b: dict) -> float:
    """Largest per-parameter ``max|a - b| / max|b|`` (parameters whose reference gradient is zero must
    match exactly)."""
    worst = 0.0
    for name, ref in b.items():
        scale = float(ref.abs().max())
        diff = float((a[name] - ref).abs().max())
        worst = max(worst, diff / scale if scale else (0.0 if diff == 0 else float("inf")))
    return worst
