"""Gated DeltaNet layers with every segment's conv and recurrent state handed over along its path.

Per rank, the layer's own input projections run on the owned tokens. Two states cross piece boundaries:

- **conv state**: a token's causal depthwise conv reads the pre-conv inputs of the ``kernel - 1`` path
  tokens before it. For a segment's first tokens these are the parent's last tokens (or the
  grandparent's, through short segments), and for a piece cut by a CP boundary they are the previous
  piece's tail on another rank. One publish per layer sends every such tail row (``kernel - 1`` rows of
  ``2 * key_dim + value_dim`` inputs per crossing) to the ranks that read it.
- **recurrent state**: each piece starts from the state after its predecessor token (the parent's last
  token at a branch point, the previous piece of its segment otherwise). As the wave's plan says
  (``gdn_handoff``): ``"rounds"``, pieces run round by round (:class:`~cpplan.hf.geometry.Pieces`) and
  after each round one publish sends the final states that pieces on other ranks start from
  (``value heads x key dim x value dim`` per crossing); ``"parallel"``, every rank runs at once and
  one publish per layer sends each crossing's affine state map (:mod:`cpplan.hf.gdn_parallel`);
  ``"head_parallel"``, no state crosses: two all-to-alls move the convolved rows from token shards to
  head shards and the outputs back, each rank running the whole wave for its heads
  (:mod:`cpplan.hf.gdn_heads`).

Then the layer's gated RMSNorm and output projection run per token.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from cpplan.hf.delta_rule import compute_dtype
from cpplan.hf.gdn_heads import head_parallel_core
from cpplan.hf.gdn_parallel import parallel_recurrence, run_pieces
from cpplan.pricing.handoff import HEAD_PARALLEL
from cpplan.pricing.handoff_mode import PARALLEL, ROUNDS


def gdn_layer(layer, hs: dict, geo, comm, *, kernels: str = "auto", handoff: str = ROUNDS) -> dict:
    """The mixer output ``(T_r, hidden)`` of every local rank from its normed states ``hs[r]``; the
    recurrent states cross ranks as ``handoff`` says (the wave's ``gdn_handoff``: ``"rounds"``,
    ``"parallel"``, :mod:`cpplan.hf.gdn_parallel`, or ``"head_parallel"``, :mod:`cpplan.hf.gdn_heads`)."""
    gdn = layer.mixer
    mixed = {r: gdn.in_proj_qkv(hs[r]) for r in comm.ranks}
    convolved = conv_with_tails(gdn, mixed, geo, comm)
    if handoff == HEAD_PARALLEL:
        core = head_parallel_core(gdn, convolved, hs, geo, comm, kernels=kernels)
    else:
        core = _recurrence_core(gdn, convolved, hs, geo, comm, kernels, handoff)
    out = {}
    for r in comm.ranks:
        z = gdn.in_proj_z(hs[r]).reshape(-1, gdn.head_v_dim)
        normed = gdn.norm(core[r].reshape(-1, gdn.head_v_dim), z)
        out[r] = gdn.out_proj(normed.reshape(hs[r].shape[0], gdn.value_dim))
    return out


def _recurrence_core(gdn, convolved: dict, hs: dict, geo, comm, kernels: str, handoff: str) -> dict:
    """The core outputs with the recurrence run on each rank's own tokens, the states handed over in
    rounds or in parallel."""
    heads = {}
    for r in comm.ranks:
        q, k, v = torch.split(convolved[r], [gdn.key_dim, gdn.key_dim, gdn.value_dim], dim=-1)
        a = gdn.in_proj_a(hs[r])
        g = -gdn.A_log.float().exp() * F.softplus(a.float() + gdn.dt_bias)
        heads[r] = (
            q.unflatten(-1, (-1, gdn.head_k_dim)),
            k.unflatten(-1, (-1, gdn.head_k_dim)),
            v.unflatten(-1, (-1, gdn.head_v_dim)),
            g,
            gdn.in_proj_b(hs[r]).sigmoid(),
        )
    run = parallel_recurrence if handoff == PARALLEL else recurrence
    return run(gdn, heads, geo, comm, kernels=kernels)


def conv_sources(geo, taps: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The conv tail rows every rank publishes (packed positions, rank-major) and, per rank, the
    ``(T_r, taps)`` row of each tap in ``[zero row, local rows, published rows]``."""
    history = geo.history(taps)
    valid = history >= 0
    foreign = valid & (geo.owner[np.maximum(history, 0)] != geo.owner[:, None])
    published = np.unique(history[foreign])
    published = published[np.argsort(geo.owner[published], kind="stable")]
    slot = np.full(geo.packed_tokens, -1, dtype=np.int64)
    slot[published] = np.arange(published.size)
    sources = {}
    for r in range(geo.num_ranks):
        mine = history[geo.owned(r)]
        src = np.where(mine >= 0, 1 + geo.local[np.maximum(mine, 0)], 0)
        remote = (mine >= 0) & (geo.owner[np.maximum(mine, 0)] != r)
        src[remote] = 1 + geo.counts[r] + slot[mine[remote]]
        sources[r] = src
    return published, sources


def conv_with_tails(gdn, mixed: dict, geo, comm) -> dict:
    """The layer's causal depthwise conv and activation over every rank's pre-conv inputs, each token
    reading its path's previous ``kernel - 1`` inputs (received from other ranks where needed)."""
    taps = gdn.conv_kernel_size
    published, sources = conv_sources(geo, taps)
    if published.size:
        counts = np.bincount(geo.owner[published], minlength=geo.num_ranks).tolist()
        mine = {r: geo.local[published[geo.owner[published] == r]] for r in comm.ranks}
        rows = {r: mixed[r][torch.as_tensor(mine[r], device=mixed[r].device)] for r in comm.ranks}
        tails = comm.publish(rows, counts)
    weight = gdn.conv1d.weight.squeeze(1)  # (channels, taps)
    out = {}
    for r in comm.ranks:
        x = mixed[r].to(weight.dtype)
        table = torch.cat([x.new_zeros((1, x.shape[1])), x, *([tails.to(x.dtype)] if published.size else [])])
        window = table[torch.as_tensor(sources[r], device=x.device)]  # (T_r, taps, channels)
        y = (window * weight.transpose(0, 1)).sum(1)
        if gdn.conv1d.bias is not None:
            y = y + gdn.conv1d.bias
        out[r] = _activation(gdn.activation)(y).to(mixed[r].dtype)
    return out


def _activation(name: str):
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def recurrence(gdn, heads: dict, geo, comm, *, kernels: str = "auto") -> dict:
    """The gated delta rule over every rank's pieces, with the recurrent state handed over along each
    path; returns each rank's ``(T_r, value heads, value dim)`` core outputs."""
    pieces = geo.pieces
    some = heads[comm.ranks[0]]
    dtype = compute_dtype(some[2].dtype)
    zero = some[2].new_zeros((gdn.num_v_heads, gdn.head_k_dim, gdn.head_v_dim), dtype=dtype)
    finals: dict[int, torch.Tensor] = {}  # piece -> final state, for local pieces and received ones
    outputs: dict[int, list] = {r: [] for r in comm.ranks}
    for round_, handoff in enumerate(pieces.handoffs):
        for r in comm.ranks:
            for step in pieces.steps(r, round_):
                _run_step(step, heads[r], geo, finals, zero, outputs[r], kernels)
        if handoff.size:
            _exchange_states(handoff, finals, geo, comm, zero)
    out = {}
    for r in comm.ranks:
        ordered = sorted(outputs[r], key=lambda item: item[0])
        out[r] = torch.cat([o for _, o in ordered]) if ordered else heads[r][2]
    return out


def _exchange_states(handoff: np.ndarray, finals: dict, geo, comm, zero: torch.Tensor) -> None:
    """Send the final states of ``handoff`` pieces to every rank (one publish, owner-major)."""
    owners = geo.pieces.owner[handoff]
    rows = {r: _stack([finals[int(i)] for i in handoff[owners == r]], zero) for r in comm.ranks}
    received = comm.publish(rows, np.bincount(owners, minlength=geo.num_ranks).tolist())
    for slot, i in enumerate(handoff.tolist()):
        finals[i] = received[slot]


def initial_states(step: np.ndarray, geo, finals: dict, zero: torch.Tensor) -> torch.Tensor:
    """``(pieces, heads, key dim, value dim)``: the state each piece of ``step`` starts from (the final
    state of its predecessor piece, zero at the start of a root segment)."""
    preds = geo.pieces.pred[step]
    return torch.stack([finals[int(p)] if p >= 0 else zero for p in preds])


def _run_step(step: np.ndarray, heads, geo, finals: dict, zero, outputs: list, kernels: str) -> None:
    parts, final = run_pieces(step, heads, geo, initial_states(step, geo, finals, zero), kernels)
    for n, i in enumerate(step.tolist()):
        finals[i] = final[n]
    outputs.extend(parts)


def _stack(states: list, zero: torch.Tensor) -> torch.Tensor:
    return torch.stack(states) if states else zero.new_zeros((0, *zero.shape))


__all__ = ["conv_sources", "conv_with_tails", "gdn_layer", "initial_states", "recurrence"]
