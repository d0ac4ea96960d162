"""Find the pieces of a transformers causal LM that cpplan drives, and refuse what it cannot route.

cpplan calls the model's own modules (so that wrappers' hooks fire: FSDP2, DDP, PEFT) but replaces the
token mixer's ``forward`` for the wave (tree attention or Gated DeltaNet with state hand-off, see
:mod:`cpplan.hf.module_calls`). That is only exact for decoder layers whose ``forward`` is
``h + mixer(input_layernorm(h))`` then ``h + mlp(post_attention_layernorm(h))``, so layer and mixer
classes are matched against the families read and checked here: Qwen3, Qwen3-MoE, Qwen3.5 (dense hybrid)
and Qwen3.5/3.6-MoE (hybrid). Classes are named by module path so that importing cpplan.hf does not
import transformers. A class an FSDP2 ``fully_shard`` made (a subclass of the model's) matches its base.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from cpplan.errors import InputError

_FAMILIES = {
    "qwen3": ("Qwen3", False),
    "qwen3_moe": ("Qwen3Moe", False),
    "qwen3_5": ("Qwen3_5", True),
    "qwen3_5_moe": ("Qwen3_5Moe", True),
}


def _registry() -> dict[str, dict[str, str]]:
    """Fully qualified class name -> role, for every supported family."""
    roles: dict[str, dict[str, str]] = {
        r: {} for r in ("model", "layer", "attention", "gated_attention", "gdn")
    }
    for family, (prefix, hybrid) in _FAMILIES.items():
        module = f"transformers.models.{family}.modeling_{family}"
        roles["model"][f"{module}.{prefix}ForCausalLM"] = family
        roles["layer"][f"{module}.{prefix}DecoderLayer"] = family
        roles["gated_attention" if hybrid else "attention"][f"{module}.{prefix}Attention"] = family
        if hybrid:
            roles["gdn"][f"{module}.{prefix}GatedDeltaNet"] = family
    return roles


_ROLES = _registry()


def role_of(module: nn.Module, role: str) -> str | None:
    """The family whose ``role`` class ``module`` is (or subclasses), else None."""
    for cls in type(module).__mro__:
        family = _ROLES[role].get(f"{cls.__module__}.{cls.__qualname__}")
        if family is not None:
            return family
    return None


def _qualified(module: nn.Module) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


@dataclass(frozen=True, kw_only=True, eq=False)
class Layer:
    """One decoder layer (``module``, called as a whole): its norms, its token mixer and what kind it is,
    and its MLP or MoE block."""

    index: int
    module: nn.Module
    kind: str  # "attention" or "gdn"
    gated: bool  # attention with an output gate (Qwen3.5)
    input_norm: nn.Module
    mixer: nn.Module
    post_norm: nn.Module
    mlp: nn.Module


@dataclass(frozen=True, kw_only=True, eq=False)
class CausalLM:
    """The parts of a supported causal LM, in execution order: ``base`` (the transformers causal LM)
    runs ``inner`` (its decoder stack) and then the LM head."""

    base: nn.Module
    inner: nn.Module
    embed: nn.Module
    rotary: nn.Module
    layers: tuple[Layer, ...]
    norm: nn.Module
    lm_head: nn.Module

    @property
    def conv_kernel(self) -> int:
        """The Gated DeltaNet conv kernel (1 when the model has no GDN layer)."""
        kernels = {layer.mixer.conv_kernel_size for layer in self.layers if layer.kind == "gdn"}
        if len(kernels) > 1:
            raise InputError(f"GDN layers disagree on the conv kernel: {sorted(kernels)}", field="model")
        return kernels.pop() if kernels else 1


def unwrap(model: nn.Module) -> nn.Module:
    """The transformers model under DDP and PEFT wrappers (LoRA layers stay in place inside it)."""
    from torch.nn.parallel import DistributedDataParallel

    while isinstance(model, DistributedDataParallel):
        model = model.module
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def adapt(model: nn.Module) -> CausalLM:
    """The parts of ``model`` cpplan drives; an :class:`~cpplan.errors.InputError` naming the class of
    the first model, layer or mixer it cannot route."""
    base = unwrap(model)
    if role_of(base, "model") is None:
        raise InputError(
            f"cpplan.hf cannot route model class {_qualified(base)}: supported are "
            f"{', '.join(sorted(_ROLES['model']))}",
            field="model",
        )
    inner = base.model
    layers = tuple(_layer(i, layer) for i, layer in enumerate(inner.layers[: base.config.num_hidden_layers]))
    return CausalLM(
        base=base,
        inner=inner,
        embed=inner.embed_tokens,
        rotary=inner.rotary_emb,
        layers=layers,
        norm=inner.norm,
        lm_head=base.lm_head,
    )


def _layer(index: int, layer: nn.Module) -> Layer:
    if role_of(layer, "layer") is None:
        raise InputError(f"layer {index}: cpplan.hf cannot route decoder layer class {_qualified(layer)}")
    mixer = getattr(layer, "linear_attn", None) or getattr(layer, "self_attn", None)
    if mixer is None:
        raise InputError(f"layer {index}: {_qualified(layer)} has neither self_attn nor linear_attn")
    if role_of(mixer, "gdn"):
        kind, gated = "gdn", False
    elif role_of(mixer, "gated_attention"):
        kind, gated = "attention", True
    elif role_of(mixer, "attention"):
        kind, gated = "attention", False
    else:
        raise InputError(f"layer {index}: cpplan.hf cannot route token mixer class {_qualified(mixer)}")
    if kind == "attention":
        _check_attention(index, mixer)
    return Layer(
        index=index,
        module=layer,
        kind=kind,
        gated=gated,
        input_norm=layer.input_layernorm,
        mixer=mixer,
        post_norm=layer.post_attention_layernorm,
        mlp=layer.mlp,
    )


def _check_attention(index: int, attn: nn.Module) -> None:
    if getattr(attn, "sliding_window", None) is not None:
        raise InputError(
            f"layer {index}: sliding-window attention ({_qualified(attn)}, window {attn.sliding_window}) "
            "is not supported by cpplan.hf"
        )
    if attn.training and attn.attention_dropout:
        raise InputError(
            f"layer {index}: attention dropout {attn.attention_dropout} in training mode is random and "
            "cannot be reproduced packed; set config.attention_dropout = 0"
        )


__all__ = ["CausalLM", "Layer", "adapt", "role_of", "unwrap"]
