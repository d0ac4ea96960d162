"""A small reference causal language model that runs packed, tree-masked and CP-sharded waves.

Token embedding, rotary positions from ``position_ids``, pre-norm (RMSNorm) blocks of multi-head
attention and a SiLU MLP, a final norm and an LM head. With a dense boolean mask, attention is written
out (scores, mask, softmax) so the mask is the only thing that decides which keys a query sees; with a
flex_attention BlockMask it runs through ``flex_attention``. Every per-token operation is local;
only attention reads other tokens, through an *exchange* that turns a rank's local keys and values into
the wave's full keys and values in packed order: the identity for an unsharded run, a permutation of
all ranks' pieces in a simulated CP run (:func:`run_simulated_cp`), an all-gather across processes
(:func:`cpplan.runtime.distributed.kv_all_gather`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from cpplan.runtime.attention_mask import TreeMask

Exchange = Callable[[torch.Tensor], torch.Tensor]
Mask = Any  # a boolean (queries, keys) tensor or a flex_attention BlockMask


@dataclass(frozen=True, kw_only=True)
class ReferenceConfig:
    """Geometry of the reference model."""

    vocab_size: int = 64
    hidden: int = 32
    num_heads: int = 4
    num_layers: int = 2
    ffn: int = 64
    rope_base: float = 10_000.0

    def __post_init__(self) -> None:
        if self.hidden % self.num_heads or (self.hidden // self.num_heads) % 2:
            raise ValueError(
                f"hidden ({self.hidden}) must split into {self.num_heads} heads of even size (rotary pairs)"
            )

    @property
    def head_dim(self) -> int:
        """Features per attention head."""
        return self.hidden // self.num_heads


def rotary(positions: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """``(cos, sin)`` stacked: shape ``(2, tokens, head_dim // 2)`` for the given positions."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return torch.stack([angles.cos(), angles.sin()]).to(dtype)


def apply_rotary(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate feature pairs of ``x`` (tokens, heads, head_dim) by the token's angles."""
    cos, sin = rope[0][:, None, :], rope[1][:, None, :]
    first, second = x[..., 0::2], x[..., 1::2]
    return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    """One pre-norm transformer block, split at the attention so keys and values can be exchanged."""

    def __init__(self, config: ReferenceConfig) -> None:
        super().__init__()
        self.config = config
        self.attn_norm = nn.RMSNorm(config.hidden)
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden, bias=False)
        self.out = nn.Linear(config.hidden, config.hidden, bias=False)
        self.mlp_norm = nn.RMSNorm(config.hidden)
        self.up = nn.Linear(config.hidden, config.ffn, bias=False)
        self.down = nn.Linear(config.ffn, config.hidden, bias=False)

    def project(self, h: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated queries ``(tokens, heads, head_dim)`` and stacked rotated keys and values
        ``(tokens, 2, heads, head_dim)`` of the local tokens."""
        heads, dim = self.config.num_heads, self.config.head_dim
        q, k, v = self.qkv(self.attn_norm(h)).view(h.shape[0], 3, heads, dim).unbind(1)
        return apply_rotary(q, rope), torch.stack([apply_rotary(k, rope), v], dim=1)

    def attend(self, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, mask: Mask) -> torch.Tensor:
        """The rest of the block for local states ``h`` given every key and value ``kv`` the queries
        may see and the mask: a (local queries, keys) boolean tensor, or a flex_attention BlockMask
        (:meth:`cpplan.runtime.attention_mask.TreeMask.block_mask`)."""
        keys, values = kv.unbind(1)
        if isinstance(mask, torch.Tensor):
            scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(self.config.head_dim)
            probs = scores.masked_fill(~mask[None], float("-inf")).softmax(dim=-1)
            attended = torch.einsum("hqk,khd->qhd", probs, values)
        else:
            from torch.nn.attention.flex_attention import flex_attention

            heads_first = [t.transpose(0, 1)[None] for t in (q, keys, values)]
            attended = flex_attention(*heads_first, block_mask=mask)[0].transpose(0, 1)
        attended = attended.reshape(h.shape)
        h = h + self.out(attended)
        return h + self.down(F.silu(self.up(self.mlp_norm(h))))

    def forward(self, h: torch.Tensor, rope: torch.Tensor, mask: Mask, exchange: Exchange) -> torch.Tensor:
        """``h``: local hidden states; ``mask``: (local queries, all keys) booleans or a BlockMask;
        ``exchange`` turns the local keys and values into all of them, in packed order."""
        q, kv = self.project(h, rope)
        return self.attend(h, q, exchange(kv), mask)


class ReferenceLM(nn.Module):
    """The reference causal LM. ``forward`` takes one rank's (or the whole wave's) tokens."""

    def __init__(self, config: ReferenceConfig | None = None) -> None:
        super().__init__()
        self.config = config or ReferenceConfig()
        self.embed = nn.Embedding(self.config.vocab_size, self.config.hidden)
        self.blocks = nn.ModuleList(Block(self.config) for _ in range(self.config.num_layers))
        self.norm = nn.RMSNorm(self.config.hidden)
        self.head = nn.Linear(self.config.hidden, self.config.vocab_size, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        mask: Mask,
        exchange: Exchange | None = None,
    ) -> torch.Tensor:
        """Logits of the local tokens. ``mask`` covers (local queries, all keys), as booleans or a
        BlockMask; without an ``exchange`` the local tokens are all the keys."""
        if input_ids.numel() and int(input_ids.max()) >= self.config.vocab_size:
            raise ValueError(
                f"token id {int(input_ids.max())} is outside the reference model's vocabulary of "
                f"{self.config.vocab_size}"
            )
        h, rope = self.layer_inputs(input_ids, position_ids)
        for block in self.blocks:
            h = block(h, rope, mask, exchange or _identity)
        return self.logits(h)

    def layer_inputs(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embedded tokens and their rotary angles (the state before the first block)."""
        h = self.embed(input_ids)
        return h, rotary(position_ids, self.config.head_dim, self.config.rope_base, h.dtype)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The LM head over final hidden states."""
        return self.head(self.norm(h))


def _identity(kv: torch.Tensor) -> torch.Tensor:
    return kv


def causal_mask(num_tokens: int) -> torch.Tensor:
    """The plain causal mask of one unpacked sequence."""
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril()


def run_alone(model: ReferenceLM, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of one request run by itself (positions 0..n-1, causal mask)."""
    tokens = torch.as_tensor(tokens, dtype=torch.int64)
    return model(tokens, torch.arange(tokens.numel()), causal_mask(tokens.numel()))


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy of one request run alone."""
    return F.cross_entropy(logits[:-1], torch.as_tensor(tokens[1:], dtype=torch.int64), reduction="sum")


def batch_loss(logits: torch.Tensor, batch) -> torch.Tensor:
    """A rank's share of the wave's summed loss, from its local logits and the batch's loss pairs."""
    terms = F.cross_entropy(logits[batch.loss_index], batch.loss_targets, reduction="none")
    return (terms * batch.loss_weights.to(terms.dtype)).sum()


def run_wave(model: ReferenceLM, batches: Sequence) -> torch.Tensor:
    """Logits of the whole packed wave run unsharded in one process (every token a query), from every
    rank's :class:`~cpplan.runtime.materialize.RankBatch` of the wave."""
    input_ids, position_ids = wave_tokens(batches)
    return model(input_ids, position_ids, TreeMask.for_batch(batches[0], queries="all").dense())


def wave_tokens(batches: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
    """The wave's packed ``input_ids`` and ``position_ids``, assembled from every rank's batch."""
    packed = int(batches[0].packed_tokens)
    input_ids = torch.empty(packed, dtype=torch.int64)
    position_ids = torch.empty(packed, dtype=torch.int64)
    for batch in batches:
        input_ids[batch.packed_index] = batch.input_ids
        position_ids[batch.packed_index] = batch.position_ids
    return input_ids, position_ids


def run_simulated_cp(
    model: ReferenceLM, batches: Sequence, *, block_size: int | None = None
) -> list[torch.Tensor]:
    """Run one wave as CP ranks in one process: each rank computes only the queries it owns, against
    keys and values rebuilt from every rank's local pieces layer by layer. Returns each rank's logits
    (rows in its ``packed_index`` order); autograd flows through the exchange. Dense masks by default;
    with ``block_size``, flex_attention BlockMasks of that block size."""
    order = torch.cat([b.packed_index for b in batches])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())
    trees = [TreeMask.for_batch(b) for b in batches]
    masks = [t.dense() if block_size is None else t.block_mask(block_size=block_size) for t in trees]
    states = [model.layer_inputs(b.input_ids, b.position_ids) for b in batches]
    hidden = [h for h, _ in states]
    for block in model.blocks:
        projected = [block.project(h, rope) for h, (_, rope) in zip(hidden, states, strict=True)]
        full = torch.cat([kv for _, kv in projected])[inverse]
        hidden = [
            block.attend(h, q, full, mask) for h, (q, _), mask in zip(hidden, projected, masks, strict=True)
        ]
    return [model.logits(h) for h in hidden]


__all__ = [
    "Block",
    "ReferenceConfig",
    "ReferenceLM",
    "batch_loss",
    "causal_mask",
    "next_token_loss",
    "run_alone",
    "run_simulated_cp",
    "run_wave",
    "wave_tokens",
]
