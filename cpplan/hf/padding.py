"""A padding wave: the empty forward and backward a GPU runs so that its wrapper's collectives line up.

Under equal waves (:func:`cpplan.pool_waves` ends a GPU's list with ``None`` for each padding wave) every
GPU of the pool runs the same number of forwards and backwards. Under FSDP2 each of them all-gathers every
layer's parameters and reduce-scatters their gradients; under DDP each backward all-reduces every
gradient. A GPU with a padding wave must therefore still call every module a real wave calls, as a
module, and produce a gradient for every parameter a real wave does, or the pool's collectives differ in
number or size and the trainer hangs.

:func:`padding_wave` runs one token through the wrapped model with the same module calls as a real wave
(the causal LM, its decoder stack, the embedding, the rotary embedding, each decoder layer with its norms,
the final norm and the LM head), except that each token mixer and each MLP or MoE block is replaced for the
call by a zero-weighted touch of its own parameters: no CP collective (a padding wave is one GPU's alone,
so the GPUs of a CP group need not pad together) and no expert routing (every expert parameter is
touched, whichever experts one token would pick). The returned loss is exactly zero and its backward adds
exactly zero to every gradient.
"""

from __future__ import annotations

import torch
from torch import nn

from cpplan.hf.decoder_routing import adapt
from cpplan.hf.module_calls import replaced_attributes, zero_touch


def padding_wave(model: nn.Module) -> torch.Tensor:
    """One padding wave through ``model`` (the module the trainer holds: FSDP2-sharded, DDP- or
    PEFT-wrapped or bare, as for :func:`cpplan.hf.packed_logprobs`): a zero scalar loss that depends on
    every trainable parameter a real wave uses. Backpropagate it as a wave's loss (scaled as the others
    are, if at all): every such parameter receives a gradient of exactly zero, through the same wrapper
    hooks (FSDP2's all-gathers and reduce-scatters, DDP's all-reduce) as a real wave. Run one per
    ``None`` entry of :func:`cpplan.pool_waves` (or of ``cpplan.PackDataset``), on this GPU alone."""
    lm = adapt(model)
    run = _PaddingRun(lm)
    with replaced_attributes(run.overrides()):
        return model(input_ids=run.input_ids[None], position_ids=run.input_ids[None])


class _PaddingRun:
    """The overriding forwards of one padding wave: one token (id 0 at position 0) through the causal LM,
    its decoder stack and each decoder layer; each mixer and MLP a zero-weighted parameter touch."""

    def __init__(self, lm) -> None:
        self.lm = lm
        self.input_ids = torch.zeros(1, dtype=torch.long, device=lm.lm_head.weight.device)

    def overrides(self) -> list:
        """(module, attribute, value) to install for the call, as a real wave does, plus the blocks."""
        mixers = [
            (layer.mixer, "forward", _touch_forward(layer.mixer, layer.kind == "attention"))
            for layer in self.lm.layers
        ]
        mlps = [(layer.mlp, "forward", _touch_forward(layer.mlp, False)) for layer in self.lm.layers]
        return [
            (self.lm.base, "forward", self.causal_lm_forward),
            (self.lm.inner, "forward", self.stack_forward),
            *mixers,
            *mlps,
            *[(layer.module, "gradient_checkpointing", False) for layer in self.lm.layers],
        ]

    def causal_lm_forward(self, *args, **kwargs) -> torch.Tensor:
        """The decoder stack, the LM head on its one state, and the logits times zero: a scalar 0."""
        hidden = self.lm.inner(input_ids=self.input_ids[None], position_ids=self.input_ids[None])
        logits = self.lm.lm_head(hidden)
        return logits.float().sum() * 0.0

    def stack_forward(self, *args, **kwargs) -> torch.Tensor:
        """Embedding, rotary, each decoder layer called as a whole, final norm; ``[1, hidden]``."""
        hidden = self.lm.embed(self.input_ids)
        position_ids = self.input_ids[None]
        cos, sin = self.lm.rotary(hidden[None], position_ids)
        for layer in self.lm.layers:
            out = layer.module(
                hidden[None], position_embeddings=(cos, sin), attention_mask=None, position_ids=position_ids
            )
            hidden = (out[0] if isinstance(out, tuple) else out)[0]
        return self.lm.norm(hidden)


def _touch_forward(block: nn.Module, pair: bool):
    """A forward for ``block`` (a token mixer or an MLP/MoE block) returning zeros shaped like its input
    that depend on the input and on one entry of each of its trainable parameters, with weight zero
    (``pair``: as ``(output, None)``, the form the decoder layer unpacks from an attention mixer)."""

    def forward(hidden_states: torch.Tensor, *args, **kwargs):
        out = hidden_states * 0 + zero_touch(block).to(device=hidden_states.device, dtype=hidden_states.dtype)
        return (out, None) if pair else out

    return forward


__all__ = ["padding_wave"]
