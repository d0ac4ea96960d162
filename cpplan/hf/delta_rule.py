"""The gated delta rule over a batch of variable-length sequences, each from its own initial state.

Per head, with state ``S`` (key dim x value dim), a token with log-decay ``g``, strength ``beta``,
key ``k`` and query ``q`` (both L2-normalised, the query scaled by ``key_dim ** -0.5``) and value ``v``:

    S <- exp(g) S;   S <- S + k (beta (v - S^T k))^T;   out = S^T q

:func:`gated_delta_rule` takes sequences packed one after another with ``cu_seqlens`` boundaries and
one initial state per sequence, and returns the outputs and every sequence's final state. On CUDA
with flash-linear-attention installed it calls fla's ``chunk_gated_delta_rule`` (on the CPU too with
``kernels="fla"`` under ``TRITON_INTERPRET=1``); otherwise it runs
:func:`chunked_delta_rule`, an exact pure-torch chunked form, in float32 or wider (float64 for float64
inputs). Grouped value heads: query/key head ``h`` serves value heads ``h * group .. h * group +
group - 1`` (as in transformers' Qwen3.5).
"""

from __future__ import annotations

import itertools
import os

import torch
import torch.nn.functional as F

CHUNK = 64


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the recurrence runs in: float32, or wider when the inputs are."""
    return torch.promote_types(dtype, torch.float32)


def l2_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dimension (the normalisation transformers and fla use
    for GDN queries and keys)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    cu_seqlens: list[int],
    initial_state: torch.Tensor,
    kernels: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs ``(tokens, value heads, value dim)`` in ``v``'s dtype and final states ``(sequences,
    value heads, key dim, value dim)`` in the recurrence dtype.

    ``q``, ``k``: ``(tokens, key heads, key dim)`` before normalisation; ``v``: ``(tokens, value heads,
    value dim)``; ``g``, ``beta``: ``(tokens, value heads)``; ``initial_state``: one state per
    sequence. ``kernels``: ``"fla"`` (required), ``"auto"`` (fla for CUDA tensors other than float64,
    when importable), anything else pure torch."""
    group = v.shape[1] // k.shape[1]
    q, k = q.repeat_interleave(group, dim=1), k.repeat_interleave(group, dim=1)
    if _use_fla(kernels, v):
        return _fla(q, k, v, g, beta, cu_seqlens, initial_state)
    out_dtype, dtype = v.dtype, compute_dtype(v.dtype)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    q = l2_normalise(q) * q.shape[-1] ** -0.5
    k = l2_normalise(k)
    outs, finals = [], []
    for n, (lo, hi) in enumerate(itertools.pairwise(cu_seqlens)):
        o, s = chunked_delta_rule(
            q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], initial_state[n].to(dtype)
        )
        outs.append(o)
        finals.append(s)
    return torch.cat(outs).to(out_dtype), torch.stack(finals)


def chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence, normalised and scaled ``q``/``k`` with as many heads as ``v``; returns the outputs
    ``(tokens, heads, value dim)`` and the final state.

    Within a chunk of ``C`` tokens, with ``G`` the cumulative log-decay from the chunk start, the
    updates ``D`` (one row per token: ``beta (v - S_before^T k)``) solve the unit lower-triangular
    system ``(I + A) D = beta v - beta exp(G) K S0`` with ``A[i, j] = beta_i exp(G_i - G_j) k_i.k_j`` for
    ``j < i``; then ``out = exp(G) Q S0 + (Q K^T * E) D`` with ``E[i, j] = exp(G_i - G_j)`` on and below
    the diagonal, and ``S1 = exp(G_C) S0 + (K exp(G_C - G))^T D``."""
    length = q.shape[0]
    pad = (-length) % CHUNK
    # (heads, chunks, C, dim); padding tokens have beta = 0 and g = 0, so they change nothing.
    q, k, v = (
        F.pad(x, (0, 0, 0, 0, 0, pad)).unflatten(0, (-1, CHUNK)).permute(2, 0, 1, 3) for x in (q, k, v)
    )
    g, beta = (F.pad(x, (0, 0, 0, pad)).unflatten(0, (-1, CHUNK)).permute(2, 0, 1) for x in (g, beta))
    cum = g.cumsum(-1)
    lower = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    system = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    solve = torch.linalg.solve_triangular
    updates_v = solve(system, beta[..., None] * v, upper=False, unitriangular=True)
    updates_k = solve(system, (beta * cum.exp())[..., None] * k, upper=False, unitriangular=True)
    within = (q @ k.transpose(-1, -2)) * decay
    q_decayed = q * cum.exp()[..., None]
    k_to_end = k * (cum[..., -1:] - cum).exp()[..., None]
    chunk_decay = cum[..., -1].exp()[..., None, None]
    outs = []
    for c in range(q.shape[1]):
        delta = updates_v[:, c] - updates_k[:, c] @ state
        outs.append(q_decayed[:, c] @ state + within[:, c] @ delta)
        state = chunk_decay[:, c] * state + k_to_end[:, c].transpose(-1, -2) @ delta
    out = torch.stack(outs, dim=1).flatten(1, 2)[:, :length]
    return out.transpose(0, 1), state


def _use_fla(kernels: str, v: torch.Tensor) -> bool:
    """fla for ``"fla"`` (CUDA tensors, or CPU ones under ``TRITON_INTERPRET=1``) and for ``"auto"`` on
    CUDA; never for float64."""
    if kernels in ("torch", "flex"):
        return False
    device_ok = v.is_cuda or (kernels == "fla" and os.environ.get("TRITON_INTERPRET") == "1")
    available = device_ok and v.dtype != torch.float64 and _fla_function() is not None
    if kernels == "fla" and not available:
        raise RuntimeError(
            "kernels='fla' needs non-float64 CUDA tensors (or CPU ones under TRITON_INTERPRET=1) and "
            "flash-linear-attention installed"
        )
    return available


def _fla_function():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None
    return chunk_gated_delta_rule


def _fla(q, k, v, g, beta, cu_seqlens, initial_state):
    # Signature followed: fla-org/flash-linear-attention, fla/ops/gated_delta_rule/chunk.py at commit
    # 92396f250f2c8f0ad841cecfe29069c8a71a83eb: chunk_gated_delta_rule(q, k, v, g, beta, scale=None,
    # initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None);
    # q/k/v are [1, T, H, K|V] with cu_seqlens, g (log space) and beta [1, T, H], initial_state
    # [N, H, K, V]; scale defaults to K ** -0.5. Run on the CPU by tests/hf/test_hf_fla_cpu.py under
    # Triton's interpreter (fla 0.6.0, triton 3.9.0).
    chunk_gated_delta_rule = _fla_function()
    cu = torch.tensor(cu_seqlens, dtype=torch.long, device=v.device)
    out, final = chunk_gated_delta_rule(
        q[None],
        k[None],
        v[None],
        g.float()[None],
        beta.to(q.dtype)[None],
        initial_state=initial_state.float(),
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        cu_seqlens=cu,
    )
    return out[0].to(v.dtype), final


__all__ = ["chunked_delta_rule", "compute_dtype", "gated_delta_rule", "l2_normalise"]
