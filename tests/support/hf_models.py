"""Shared helpers for the cpplan.hf tests: tiny random transformers models, prefix-tree workloads and
plans (planned, or with chunks dealt to ranks in a zigzag or at random), and exactness measurements
(the models, the mixed workload and the measures live in :mod:`cpplan.gpu_check.tiny_models`, which
ships)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import cpplan
from cpplan.gpu_check.tiny_models import (  # noqa: F401 (shared with cpplan gpu-check; re-exported)
    VOCAB,
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    tiny_model,
    weighted_sum,
)

CARD = "qwen3.6-35b-a3b"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors on shared cores: one intra-op thread (more only spin against other processes)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, VOCAB, n).tolist()


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


def scattered(result: cpplan.PlanResult | cpplan.Plan, cp: int, seed: int = 0) -> cpplan.Plan:
    """The same waves with every chunk owned by a rank drawn at random (``seed``), every rank owning at
    least one chunk where there are enough: ranks own chunks in no order, and segments cross ranks many
    times."""
    rng = np.random.default_rng(seed)
    waves = []
    for wave in (result.plan if isinstance(result, cpplan.PlanResult) else result).waves:
        owner = rng.integers(0, cp, wave.owner.size)
        owner[rng.permutation(wave.owner.size)[:cp]] = np.arange(min(cp, wave.owner.size))
        waves.append(dataclasses.replace(wave, owner=owner.astype(wave.owner.dtype)))
    return cpplan.Plan(strategy="scattered", waves=tuple(waves))


def with_gdn_handoff(result, mode: str) -> cpplan.Plan:
    """The plan's waves with their ``gdn_handoff`` set to ``mode`` (``"rounds"`` or ``"parallel"``)."""
    plan_ = result.plan if isinstance(result, cpplan.PlanResult) else result
    waves = tuple(dataclasses.replace(w, gdn_handoff=mode) for w in plan_.waves)
    return cpplan.Plan(strategy=plan_.strategy, waves=waves)


def slow_decay(model, a_log: float = -6.0):
    """``model`` with every Gated DeltaNet layer's ``A_log`` set to ``a_log`` (in place; returned). The
    tiny models' random ``A_log`` (0.8 to 2.7) decay the recurrent state by about ``e^-6`` per token, so
    a state handed over matters for a token or two; at ``-6`` it decays by about 0.3 % per token and
    carries over whole pieces."""
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                layer.linear_attn.A_log.fill_(a_log)
    return model
