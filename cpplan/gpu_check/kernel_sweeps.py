"""The kernels alone, timed forward + backward: the gated delta rule over variable-length sequences with
initial states (fla's ``chunk_gated_delta_rule`` on CUDA, via :func:`cpplan.hf.delta_rule.gated_delta_rule`)
and the tree attention of a planned GRPO wave (compiled flex_attention with the tree BlockMask on CUDA,
via :func:`cpplan.hf.attention.tree_attention`) against causal attention over the same tokens. Each is
called with ``kernels="auto"``: on the CPU (a dry run) they run the pure-torch paths at tiny shapes."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from cpplan.hf.attention import WaveMasks, tree_attention
from cpplan.hf.delta_rule import gated_delta_rule
from cpplan.hf.geometry import WaveGeometry
from cpplan.runtime.materialize import materialize_wave
from cpplan.spec.workload import Workload


@dataclass(frozen=True, kw_only=True)
class GdnShape:
    """The GDN sweep's heads and sizes: ``value_heads`` heads of ``head_dim`` (``key_heads`` query/key
    heads), each ``tokens`` value split into ``num_sequences`` equal sequences."""

    value_heads: int
    key_heads: int
    head_dim: int
    num_sequences: int
    tokens: tuple[int, ...]


GPU_GDN = GdnShape(
    value_heads=32, key_heads=16, head_dim=128, num_sequences=4, tokens=tuple(2**k for k in range(11, 17))
)
"""32 value heads of 128 (16 key heads, as Qwen3.6-35B-A3B), T = 2K .. 64K in 4 sequences."""
DRY_GDN = GdnShape(value_heads=4, key_heads=2, head_dim=16, num_sequences=2, tokens=(128, 256))


@dataclass(frozen=True, kw_only=True)
class KernelRow:
    """One timed kernel run: what ran, its size and its seconds (the mean of ``reps`` warm runs after
    one untimed first run, whose seconds are ``first_s``)."""

    kernel: str
    path: str
    tokens: int
    dtype: str
    first_s: float
    seconds: float
    reps: int
    work: float
    """Tokens (GDN) or attended query-key pairs (attention) the run computes."""
    card_s_per_work: float | None
    """The card's seconds per token and layer (GDN) or per pair and layer (attention), forward,
    recompute and backward."""

    def to_dict(self) -> dict:
        """JSON form with the measured seconds per unit of work."""
        return {**asdict(self), "s_per_work": self.seconds / self.work if self.work else None}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], None], device: torch.device, reps: int) -> tuple[float, float]:
    """The first run's seconds and the mean of ``reps`` more (device synchronized around each)."""
    _synchronize(device)
    start = time.perf_counter()
    fn()
    _synchronize(device)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    _synchronize(device)
    return first, (time.perf_counter() - start) / reps


def gdn_path(device: torch.device, dtype: torch.dtype) -> str:
    """Which gated delta rule ``kernels="auto"`` runs."""
    fla = importlib.util.find_spec("fla") is not None
    if device.type == "cuda" and dtype != torch.float64 and fla:
        return "fla chunk_gated_delta_rule"
    return "pure-torch chunked delta rule"


def gdn_inputs(shape: GdnShape, tokens: int, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """Random ``q, k, v, g, beta`` for ``tokens`` tokens, ``cu_seqlens`` and initial states, all
    requiring gradients."""
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def rand(*size):
        return torch.randn(*size, generator=gen).to(device=device, dtype=dtype)

    q, k = rand(tokens, shape.key_heads, shape.head_dim), rand(tokens, shape.key_heads, shape.head_dim)
    v = rand(tokens, shape.value_heads, shape.head_dim)
    g = -F.softplus(rand(tokens, shape.value_heads).float()).to(dtype)
    beta = torch.sigmoid(rand(tokens, shape.value_heads))
    state = 0.1 * rand(shape.num_sequences, shape.value_heads, shape.head_dim, shape.head_dim).float()
    tensors = [x.requires_grad_() for x in (q, k, v, g, beta, state)]
    cuts = np.linspace(0, tokens, shape.num_sequences + 1).round().astype(int).tolist()
    return tensors, cuts


def gdn_sweep(
    shape: GdnShape,
    *,
    device: str,
    dtype: torch.dtype,
    card_s_per_token: float | None,
    allowed: Callable[[float], bool],
    reps: int = 3,
) -> list[KernelRow]:
    """The gated delta rule forward + backward at each size of ``shape`` while ``allowed(estimate_s)``
    (the estimate: twice the last size's seconds x (reps + 1))."""
    dev = torch.device(device)
    rows: list[KernelRow] = []
    estimate = 0.0
    for tokens in shape.tokens:
        if not allowed(estimate):
            break
        (q, k, v, g, beta, state), cuts = gdn_inputs(shape, tokens, dev, dtype)

        def step(q=q, k=k, v=v, g=g, beta=beta, state=state, cuts=cuts) -> None:
            out, final = gated_delta_rule(q, k, v, g, beta, cu_seqlens=cuts, initial_state=state)
            (out.float().square().mean() + final.float().square().mean()).backward()

        first, seconds = timed(step, dev, reps)
        estimate = 2 * seconds * (reps + 1)
        rows.append(
            KernelRow(
                kernel="gdn",
                path=gdn_path(dev, dtype),
                tokens=tokens,
                dtype=str(dtype).removeprefix("torch."),
                first_s=first,
                seconds=seconds,
                reps=reps,
                work=float(tokens),
                card_s_per_work=card_s_per_token,
            )
        )
    return rows


class _Heads:
    """What :func:`tree_attention` reads of an attention module: its scaling and GQA group."""

    def __init__(self, head_dim: int, groups: int) -> None:
        self.scaling = head_dim**-0.5
        self.num_key_value_groups = groups


@dataclass(frozen=True, kw_only=True)
class AttentionShape:
    """Heads of the attention sweep (``heads`` query heads, ``kv_heads`` key/value heads of ``head_dim``)."""

    heads: int
    kv_heads: int
    head_dim: int


GPU_ATTENTION = AttentionShape(heads=16, kv_heads=2, head_dim=256)
DRY_ATTENTION = AttentionShape(heads=4, kv_heads=2, head_dim=16)


def tree_pairs(geo: WaveGeometry) -> int:
    """Query-key pairs the tree mask allows: per segment of length L below ancestors of A tokens,
    ``L * A + L (L + 1) / 2``."""
    lengths = geo.seg_length.astype(np.int64)
    above = np.zeros(lengths.size, dtype=np.int64)
    for s, parent in enumerate(geo.seg_parent.tolist()):
        above[s] = 0 if parent < 0 else above[parent] + lengths[parent]
    return int((lengths * above + lengths * (lengths + 1) // 2).sum())


def attention_sweep(
    workloads: list[tuple[Workload, dict]],
    shape: AttentionShape,
    *,
    device: str,
    dtype: torch.dtype,
    card_s_per_pair: float | None,
    allowed: Callable[[float], bool],
    reps: int = 3,
) -> list[KernelRow]:
    """For each planned CP1 wave ``(workload, plan)``: its tree attention and causal attention over the
    same packed tokens, forward + backward."""
    dev = torch.device(device)
    rows: list[KernelRow] = []
    estimate = 0.0
    name = str(dtype).removeprefix("torch.")
    for workload, plan in workloads:
        if not allowed(estimate):
            break
        geo = WaveGeometry.build(materialize_wave(plan, workload, wave=0))
        tokens = geo.packed_tokens
        gen = torch.Generator(device="cpu").manual_seed(0)

        def rand(*size, gen=gen):
            return torch.randn(*size, generator=gen).to(device=dev, dtype=dtype).requires_grad_()

        q = rand(shape.heads, tokens, shape.head_dim)
        k, v = rand(shape.kv_heads, tokens, shape.head_dim), rand(shape.kv_heads, tokens, shape.head_dim)
        heads = _Heads(shape.head_dim, shape.heads // shape.kv_heads)
        masks = WaveMasks(geo)

        def tree(q=q, k=k, v=v, geo=geo, heads=heads, masks=masks) -> None:
            tree_attention(heads, q, k, v, geo, 0, "auto", masks).float().square().mean().backward()

        def causal(q=q, k=k, v=v, groups=heads.num_key_value_groups) -> None:
            # Keys and values repeated per query head: the fused (flash) kernels take equal head counts.
            keys, values = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
            out = F.scaled_dot_product_attention(q[None], keys[None], values[None], is_causal=True)
            out.float().square().mean().backward()

        path = "compiled flex_attention, tree BlockMask" if dev.type == "cuda" else "pure torch, per segment"
        estimate = 0.0
        for kernel, fn, pairs, label in (
            ("tree_attention", tree, tree_pairs(geo), path),
            ("causal_attention", causal, tokens * (tokens + 1) // 2, "scaled_dot_product_attention causal"),
        ):
            first, seconds = timed(fn, dev, reps)
            estimate += 4 * seconds * (reps + 1)
            rows.append(
                KernelRow(
                    kernel=kernel,
                    path=label,
                    tokens=tokens,
                    dtype=name,
                    first_s=first,
                    seconds=seconds,
                    reps=reps,
                    work=float(pairs),
                    card_s_per_work=card_s_per_pair,
                )
            )
    return rows


__all__ = [
    "DRY_ATTENTION",
    "DRY_GDN",
    "GPU_ATTENTION",
    "GPU_GDN",
    "AttentionShape",
    "GdnShape",
    "KernelRow",
    "attention_sweep",
    "gdn_inputs",
    "gdn_path",
    "gdn_sweep",
    "timed",
    "tree_pairs",
]
