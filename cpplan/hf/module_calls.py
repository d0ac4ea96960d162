"""One wave through the model's own module calls, so that every wrapper's hooks fire.

Trainers wrap the model: FSDP2's ``fully_shard`` on each decoder layer and the root (its pre-forward hook
all-gathers the parameters, its post-forward hook reshards them and arms the backward reduce-scatter),
DDP around the root (its forward arms the gradient all-reduce), PEFT around the transformers model. A
wave is therefore run as ``model(input_ids=...)``, the outermost module the caller holds, and inside it
every module the transformers forward would call is called as a module: the causal LM, its decoder stack,
the embedding, each decoder layer, each token mixer, the final norm and the LM head.

For the duration of the call the ``forward`` of three kinds of module is replaced (an instance attribute,
removed afterwards, so the model is unchanged): the causal LM's (runs the decoder stack, then reads the
log-probs back), the decoder stack's (embedding, rotary, each layer called as a whole, final norm) and
each token mixer's (cpplan's tree attention or Gated DeltaNet with state hand-off over all local ranks).
transformers' own gradient checkpointing of the decoder layers is switched off for the call: its
recomputation in backward would run after the mixers' forwards are restored (so the wave keeps all
activations, as the planner prices them).

A CP rank that owns no token of the wave still runs every module on its zero rows and joins every
collective. So that it gives every parameter a real wave trains a gradient (exactly zero), as FSDP2's
reduce-scatters and DDP's all-reduces need the same parameters on every rank, its token mixers and MLP
or MoE blocks add a zero-weighted touch of their parameters (:func:`zero_touch`) to their empty outputs:
a MoE block routes no token to any expert, a Gated DeltaNet layer runs no recurrence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from cpplan.hf.attention import attention_layer
from cpplan.hf.gdn import gdn_layer

_ABSENT = object()


@contextmanager
def replaced_attributes(overrides: list[tuple[nn.Module, str, object]]) -> Iterator[None]:
    """Within the context, each ``(module, name, value)`` sets an instance attribute (a ``forward``
    override, a flag); afterwards the instance's own value (such as accelerate's ``forward`` hook) is
    put back, or the attribute removed so the class's applies again."""
    saved = []
    try:
        for module, name, value in overrides:
            saved.append((module, name, module.__dict__.get(name, _ABSENT)))
            module.__dict__[name] = value
        yield
    finally:
        for module, name, before in reversed(saved):
            if before is _ABSENT:
                module.__dict__.pop(name, None)
            else:
                module.__dict__[name] = before


def local_split(x: torch.Tensor, geo, comm, dim: int = 0) -> dict[int, torch.Tensor]:
    """Rows of the local ranks' tokens concatenated rank-major, as one tensor per local rank."""
    sizes = [geo.counts[r] for r in comm.ranks]
    return dict(zip(comm.ranks, torch.split(x, sizes, dim=dim), strict=True))


def zero_touch(block: nn.Module) -> torch.Tensor:
    """A scalar zero that depends on one entry of each trainable parameter of ``block`` (called inside
    the block's forward, where FSDP2 has its parameters unsharded): added to an output, it changes no
    value and gives each of them a gradient of exactly zero."""
    touched = [p.reshape(-1)[0].float() for p in block.parameters() if p.requires_grad]
    return torch.stack(touched).sum() * 0.0 if touched else torch.zeros(())


def _touched(out, block: nn.Module):
    """``out`` (a tensor, or a tuple whose first entry is one) plus :func:`zero_touch` of ``block``."""
    first = out[0] if isinstance(out, tuple) else out
    first = first + zero_touch(block).to(device=first.device, dtype=first.dtype)
    return (first, *out[1:]) if isinstance(out, tuple) else first


def idle_forward(block: nn.Module) -> Callable:
    """For a rank that owns no token of the wave: ``block``'s own forward (on its zero rows), its output
    touching every trainable parameter of the block (:func:`zero_touch`)."""
    own = block.forward

    def forward(*args, **kwargs):
        return _touched(own(*args, **kwargs), block)

    return forward


def mixer_forward(layer, wave) -> Callable:
    """The forward that replaces ``layer.mixer.forward`` for one wave: the normed states of all local
    ranks in, the mixer output of each token out, in the form the decoder layer unpacks (touching every
    parameter of the mixer where the local ranks own no token: :func:`zero_touch`)."""

    def forward(hidden_states: torch.Tensor, *args, **kwargs):
        hs = local_split(hidden_states[0], wave.geo, wave.comm)
        if layer.kind == "attention":
            mixed = attention_layer(
                layer, hs, wave.ropes, wave.geo, wave.comm, kernels=wave.kernels, masks=wave.masks
            )
        else:
            mixed = gdn_layer(layer, hs, wave.geo, wave.comm, kernels=wave.kernels, handoff=wave.handoff)
        out = torch.cat([mixed[r] for r in wave.comm.ranks])[None]
        if wave.idle:
            out = _touched(out, layer.mixer)
        return (out, None) if layer.kind == "attention" else out

    return forward


__all__ = ["idle_forward", "local_split", "mixer_forward", "replaced_attributes", "zero_touch"]
