"""Attention layers over the tree mask, each CP rank computing only its owned queries.

The layer's own projections, q/k norms and rotary function (the ``apply_rotary_pos_emb`` of the
model's modeling module, so partial rotary is whatever the model does) make every rank's queries, keys
and values; one publish gives every rank all keys and values of the wave in packed order. A query at
packed position ``p`` of segment ``s`` attends the keys of ``s``'s ancestor segments and of ``s`` up to
``p``: with the pure-torch kernels that is computed piece by piece (the batch's ``piece_cu_seqlens``
queries against their ``attn_k_index`` keys, causal aligned bottom-right), with
flex_attention (CUDA by default) through the rank's tree BlockMask of
:class:`cpplan.runtime.attention_mask.TreeMask` (built once per wave and rank and held by the wave's
:class:`WaveMasks`, so no mask outlives its wave).
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import torch
import torch.nn.functional as F

from cpplan.hf.delta_rule import compute_dtype
from cpplan.hf.piece_batches import RankPieceBatches, piece_batches


def project(layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotated queries ``(heads, T, D)``, keys and values ``(kv heads, T, D)`` and the output gate
    ``(T, heads * D)`` (None for ungated attention) of local states ``h`` ``(T, hidden)``."""
    attn = layer.mixer
    dim, tokens = attn.head_dim, h.shape[0]
    heads, kv_heads = attn.config.num_attention_heads, attn.config.num_key_value_heads
    x = h[None]
    if layer.gated:
        q, gate = torch.chunk(attn.q_proj(x).view(1, tokens, heads, 2 * dim), 2, dim=-1)
        gate = gate.reshape(tokens, heads * dim)
    else:
        q, gate = attn.q_proj(x).view(1, tokens, heads, dim), None
    q = attn.q_norm(q).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(x).view(1, tokens, kv_heads, dim)).transpose(1, 2)
    v = attn.v_proj(x).view(1, tokens, kv_heads, dim).transpose(1, 2)
    rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    q, k = rotate(q, k, cos, sin)
    return q[0], k[0], v[0], gate


def attention_layer(
    layer, hs: dict, ropes: dict, geo, comm, *, kernels: str = "auto", masks: WaveMasks | None = None
) -> dict:
    """The mixer output ``(T_r, hidden)`` of every local rank from its normed states ``hs[r]``;
    ``masks``: the wave's BlockMasks (:class:`WaveMasks`; default: built for this layer alone)."""
    masks = masks or WaveMasks(geo)
    projected = {r: project(layer, hs[r], *ropes[r]) for r in comm.ranks}
    # One row per owned token: its keys and values, (kv heads, 2, head dim) flattened.
    rows = {r: torch.stack([k, v], dim=0).transpose(0, 2).flatten(1) for r, (_, k, v, _) in projected.items()}
    gathered = comm.publish(rows, geo.counts)
    order = torch.as_tensor(np.argsort(geo.rank_major, kind="stable"), device=gathered.device)
    kv_heads, dim = projected[comm.ranks[0]][1].shape[0], layer.mixer.head_dim
    keys, values = gathered[order].view(-1, kv_heads, 2, dim).unbind(2)
    out = {}
    for r in comm.ranks:
        q, _, _, gate = projected[r]
        attended = tree_attention(
            layer.mixer, q, keys.transpose(0, 1), values.transpose(0, 1), geo, r, kernels, masks
        )
        attended = attended.transpose(0, 1).flatten(1)
        if gate is not None:
            attended = attended * torch.sigmoid(gate)
        out[r] = layer.mixer.o_proj(attended)
    return out


def tree_attention(
    attn, q, keys, values, geo, rank: int, kernels: str, masks: WaveMasks | None = None
) -> torch.Tensor:
    """``(heads, T_r, D)`` outputs of the rank's queries ``q`` against the wave's ``keys``/``values``
    ``(kv heads, packed, D)`` under the tree mask (flex_attention reads the rank's BlockMask from
    ``masks``, default: one built for this call)."""
    if kernels == "flex" or (kernels in ("auto", "fla") and q.is_cuda):
        return _flex(attn, q, keys, values, geo, rank, masks or WaveMasks(geo))
    return _by_piece(attn, q, keys, values, geo, rank, masks or WaveMasks(geo))


def _by_piece(attn, q, keys, values, geo, rank: int, masks: WaveMasks) -> torch.Tensor:
    """The rank's pieces (``piece_cu_seqlens``), each query against the keys of its key path
    (``attn_k_index``), causal aligned bottom-right (the queries are the path's last keys), in the few
    batched calls of :func:`cpplan.hf.piece_batches.piece_batches`."""
    found = masks.piece_batches(rank, q.device)
    by_row = q.transpose(0, 1)  # (T_r, heads, D)
    keys, values = keys.transpose(0, 1), values.transpose(0, 1)  # (packed, kv heads, D)
    outs = [_batched(attn, by_row, keys, values, batch) for batch in found.batches]
    if not outs:
        return q
    return torch.cat(outs).index_select(0, found.row_order).transpose(0, 1)


def _batched(attn, q, keys, values, batch) -> torch.Tensor:
    """``(real query slots, heads, D)``: one batch's queries against its key paths. In float32 and
    wider, torch's fused attention over 4-D tensors (its CPU flash kernel saves no score matrix for
    backward); narrower, scores and softmax in float32."""
    bq, bk, bv = _slots(q, batch.query_rows), _slots(keys, batch.key_index), _slots(values, batch.key_index)
    if compute_dtype(q.dtype) == q.dtype:
        causal = batch.visible is None
        out = F.scaled_dot_product_attention(
            bq, bk, bv, attn_mask=batch.visible, is_causal=causal, scale=attn.scaling, enable_gqa=True
        )
    else:
        out = _upcast_attention(bq, bk, bv, batch, attn)
    return out.transpose(1, 2).flatten(0, 1).index_select(0, batch.real_slots)


def _slots(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``(B, heads, S, D)``: the rows ``(N, heads, D)`` at ``index`` ``(B, S)``."""
    return rows.index_select(0, index.flatten()).view(*index.shape, *rows.shape[1:]).transpose(1, 2)


def _upcast_attention(q, keys, values, batch, attn) -> torch.Tensor:
    """Scores and softmax in float32 for a narrow dtype (bfloat16), keys shared by GQA groups."""
    keys = keys.repeat_interleave(attn.num_key_value_groups, 1)
    values = values.repeat_interleave(attn.num_key_value_groups, 1)
    visible = batch.visible
    if visible is None:
        visible = torch.ones(q.shape[-2], keys.shape[-2], dtype=torch.bool, device=q.device).tril()
    scores = (q @ keys.transpose(-1, -2)).to(compute_dtype(q.dtype)) * attn.scaling
    probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1).to(q.dtype)
    return probs @ values


def _flex(attn, q, keys, values, geo, rank: int, masks: WaveMasks) -> torch.Tensor:
    """flex_attention with the rank's tree BlockMask: compiled on CUDA, eager elsewhere (on the CPU
    torch has no flex_attention backward, so there it serves forward checks only)."""
    from torch.nn.attention.flex_attention import flex_attention

    mask = masks.block_mask(rank, q.device)
    fn = _compiled(flex_attention) if q.is_cuda else flex_attention
    out = fn(q[None], keys[None], values[None], block_mask=mask, scale=attn.scaling, enable_gqa=True)
    return out[0]


@functools.lru_cache(maxsize=2)  # the compiled flex_attention: a kernel, no tensor
def _compiled(function):
    return torch.compile(function)


class WaveMasks:
    """The tree BlockMasks of one wave and its ranks' batched pieces: each rank's built on first use and
    kept by this object, which the wave's forward makes and drops (so every layer of the wave shares
    them and none outlives it)."""

    def __init__(self, geo) -> None:
        self.geo = geo
        self._masks: dict[tuple[int, str], object] = {}
        self._pieces: dict[tuple[int, str], RankPieceBatches] = {}

    def block_mask(self, rank: int, device: torch.device):
        """The rank's BlockMask on ``device`` (built once per wave)."""
        key = (rank, str(device))
        if key not in self._masks:
            self._masks[key] = _block_mask(self.geo, rank, device)
        return self._masks[key]

    def piece_batches(self, rank: int, device: torch.device) -> RankPieceBatches:
        """The rank's pieces as batched calls (:func:`cpplan.hf.piece_batches.piece_batches`), built once
        per wave."""
        key = (rank, str(device))
        if key not in self._pieces:
            self._pieces[key] = piece_batches(self.geo, rank, device)
        return self._pieces[key]


def _block_mask(geo, rank: int, device: torch.device):
    """The rank's tree BlockMask, its block lists built on the CPU and its mask_mod reading device
    copies of the segment metadata."""
    from dataclasses import replace

    from cpplan.runtime.attention_mask import TreeMask

    seg_parent = torch.as_tensor(geo.seg_parent)
    cpu = TreeMask.build(torch.as_tensor(geo.segment), seg_parent, torch.as_tensor(geo.owned(rank)))
    mask = cpu.block_mask(block_size=128).to(device)
    on_device = replace(
        cpu,
        segment_ids=cpu.segment_ids.to(device),
        query_index=cpu.query_index.to(device),
        depth=cpu.depth.to(device),
        ancestors=cpu.ancestors.to(device),
    )
    mask.mask_mod = on_device.mask_mod()
    return mask


__all__ = ["WaveMasks", "attention_layer", "project", "tree_attention"]
