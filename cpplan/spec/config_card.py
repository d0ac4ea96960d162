"""A model card derived from a transformers config, for a model no shipped card describes.

A card's floors and costs are formulas over its geometry (:mod:`cpplan.spec.card`): the shipped cards of
one architecture family differ only in their ``[geometry]`` (and their calibration). :func:`card_from_config`
therefore reads the geometry off the model's own ``config`` (hidden size, FFN, heads, layers and their
kinds, experts, Gated DeltaNet heads, vocabulary, dtype) and pairs it with the floors, cost terms,
constants and calibrated coefficients of the shipped card of the same family:

- dense attention-only (Qwen3, Llama-like): ``qwen3-8b``;
- mixture-of-experts attention-only (Qwen3-MoE): ``qwen3-30b-a3b``;
- hybrid Gated DeltaNet / attention, dense (Qwen3.5): ``qwen3.5-27b``;
- hybrid Gated DeltaNet / attention, MoE (Qwen3.5-MoE, Qwen3.6): ``qwen3.6-35b-a3b``.

The coefficients are transferred, not measured on the model (the card's calibration says so); the
learned correction (:meth:`cpplan.Planner.observe`) is what adapts them to what the model measures.

One price is calibrated by the model's size (:func:`segment_formula`): the template's per-segment
seconds (``layers * 4e-6``, a varlen kernel's bookkeeping on a large model) are at most
:func:`segment_tokens` tokens' forward and backward seconds. For a tiny model the template's price is
thousands of tokens' worth (hidden 32, 2 layers: about 19,000), so sharing a prompt, which adds a
segment, looked slower than storing it once per completion whatever the prompt's length; measured
(``benchmarks/bench_sharing_overhead.py``), an extra segment of the packed step costs 75 tokens at that
size and about 10 at hidden 256. Realistic sizes (Qwen3-0.6B and up) keep the template's price: there
it is already below the cap.
"""

from __future__ import annotations

import math
from typing import Any

from cpplan.spec.card import ModelCard, _check_formulas, read_toml
from cpplan.spec.shipped import toml_files

TEMPLATES = {
    ("attention", False): "qwen3-8b",
    ("attention", True): "qwen3-30b-a3b",
    ("hybrid", False): "qwen3.5-27b",
    ("hybrid", True): "qwen3.6-35b-a3b",
}
"""The shipped card whose floors and costs a derived card uses, by (layer kinds, mixture of experts)."""

SEGMENT_TOKENS_TINY = 75.0
"""Measured seconds of one extra segment, in tokens' forward and backward seconds, of the packed step
at the reference size :data:`SEGMENT_REFERENCE_PARAMS` (benchmarks/results/bench_sharing_overhead.json:
hidden 32, 2 layers, on the CPU)."""
SEGMENT_REFERENCE_PARAMS = 12_000
"""Active parameters per layer (``active_params / layers``) of the reference size (hidden 32, FFN 48, 4/2
heads of 16, 2 layers, vocabulary 64: 11,776)."""
SEGMENT_TOKENS_FLOOR = 12.0
"""The cap never falls below this many tokens (the benchmark measures 5 to 10 at hidden 128 and 256, so
a larger model's segment is not priced below what was measured; Qwen3-0.6B's template price, 10.4
tokens, stays under it, so realistic cards keep their price)."""

_DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


def card_from_config(config: Any, *, dtype_bytes: int | None = None) -> ModelCard:
    """The model card of ``config`` (a transformers ``PretrainedConfig``; a multimodal config's text
    config is read): its geometry, the floors and costs of the shipped card of its family (see the
    module docstring). ``dtype_bytes``: the bytes of one parameter or activation element (default: the
    config's ``dtype``, else 2). Raises ``ValueError`` naming the config attribute it cannot read, or the
    layer layout no card prices (MoE layers mixed with dense ones)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    geometry = _geometry(text, dtype_bytes)
    hybrid = "gdn" in geometry["layer_pattern"]
    moe = geometry["num_experts"] > 0
    template = TEMPLATES[("hybrid" if hybrid else "attention", moe)]
    data, _ = read_toml(toml_files("cpplan.cards")[template], what="model card")
    model_type = str(getattr(text, "model_type", "") or "model")
    name = f"{model_type}-{geometry['hidden']}h-{geometry['num_layers']}l-from-config"
    data |= {"name": name, "display_name": name, "aliases": [], "geometry": geometry}
    segments = data.get("cost", {}).get("terms", {}).get("segments")
    if segments is not None and {"forward", "backward"} <= data["cost"]["terms"].keys():
        terms = data["cost"]["terms"]
        segments["seconds_per_unit"] = segment_formula(
            segments["seconds_per_unit"],
            terms["forward"]["seconds_per_unit"],
            terms["backward"]["seconds_per_unit"],
        )
        segments["doc"] = (
            f"{segments.get('doc', '')}; at most segment_tokens tokens' forward and backward "
            "seconds (cpplan.spec.config_card.segment_formula: calibrated by the model's size)"
        )
    data["calibration"] = _transferred(data.get("calibration", {}), template)
    card = ModelCard.model_validate(data)
    _check_formulas(card)
    return card


def segment_tokens(layer_params: float) -> float:
    """The most tokens' seconds one segment costs in a derived card, for a model of ``layer_params``
    active parameters per layer: :data:`SEGMENT_TOKENS_TINY` at the reference size, falling as the
    square root of the size (the benchmark's 75, 27 and 10 tokens at 11.8K, 49K and 0.79M parameters per
    layer lie within 1.3x of it), never below :data:`SEGMENT_TOKENS_FLOOR`."""
    return max(SEGMENT_TOKENS_FLOOR, SEGMENT_TOKENS_TINY * math.sqrt(SEGMENT_REFERENCE_PARAMS / layer_params))


def segment_formula(template: str, forward: str, backward: str) -> str:
    """The derived card's per-segment seconds: the template's formula, capped at
    :func:`segment_tokens` of the card's size times one token's forward and backward seconds."""
    tokens = (
        f"max({SEGMENT_TOKENS_FLOOR!r}, {SEGMENT_TOKENS_TINY!r} * "
        f"({SEGMENT_REFERENCE_PARAMS} * layers / active_params) ** 0.5)"
    )
    return f"min({template}, {tokens} * (({forward}) + ({backward})))"


def _geometry(config: Any, dtype_bytes: int | None) -> dict[str, Any]:
    """The card's ``[geometry]`` read off ``config``."""
    hidden = _required(config, "hidden_size")
    heads = _required(config, "num_attention_heads")
    layers = _required(config, "num_hidden_layers")
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    experts = _first(config, ("num_experts", "num_local_experts", "n_routed_experts"))
    kinds = [
        _layer_kind(kind) for kind in (getattr(config, "layer_types", None) or ["full_attention"] * layers)
    ]
    geometry: dict[str, Any] = {
        "hidden": hidden,
        "ffn": 0 if experts else _required(config, "intermediate_size"),
        "num_heads": heads,
        "num_kv_heads": getattr(config, "num_key_value_heads", None) or heads,
        "head_dim": head_dim,
        "num_layers": layers,
        "layer_pattern": _period(kinds),
        "vocab": _required(config, "vocab_size"),
        "dtype_bytes": dtype_bytes or _config_dtype_bytes(config),
        "max_context": getattr(config, "max_position_embeddings", None) or 131072,
    }
    if experts:
        geometry |= _experts(config, experts)
    else:
        geometry |= {"num_experts": 0}
    if "gdn" in kinds:
        geometry |= {
            "gdn_value_heads": _required(config, "linear_num_value_heads"),
            "gdn_key_heads": _required(config, "linear_num_key_heads"),
            # the card has one GDN head size for keys and values: the larger bounds both
            "gdn_head_dim": max(
                _required(config, "linear_key_head_dim"), _required(config, "linear_value_head_dim")
            ),
            "gdn_conv_kernel": _required(config, "linear_conv_kernel_dim"),
        }
    return geometry


def _experts(config: Any, experts: int) -> dict[str, int]:
    """The MoE part of the geometry; a model whose layers are not all MoE is refused."""
    if getattr(config, "mlp_only_layers", None) or (getattr(config, "decoder_sparse_step", 1) or 1) != 1:
        raise ValueError(
            "config has dense MLP layers among its MoE layers (mlp_only_layers / decoder_sparse_step): "
            "no derived card prices that mix; name a card"
        )
    shared = _first(config, ("shared_expert_intermediate_size",))
    return {
        "num_experts": experts,
        "top_k": _required(config, "num_experts_per_tok"),
        "expert_ffn": _required(config, "moe_intermediate_size"),
        "shared_expert_ffn": shared,
    }


def _layer_kind(kind: str) -> str:
    """A config's layer type as a card's layer kind."""
    if kind == "linear_attention":
        return "gdn"
    if "attention" in kind:
        return "attention"
    raise ValueError(f"config.layer_types has {kind!r}, which no card prices (attention or linear_attention)")


def _period(kinds: list[str]) -> list[str]:
    """The shortest pattern whose repetition (truncated) gives ``kinds``."""
    for size in range(1, len(kinds) + 1):
        if all(kind == kinds[i % size] for i, kind in enumerate(kinds)):
            return kinds[:size]
    raise AssertionError("unreachable: the whole list is its own period")


def _required(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config.{name} must be a positive integer to derive a card, got {value!r}")
    return value


def _first(config: Any, names: tuple[str, ...]) -> int:
    """The first of ``names`` the config sets to a positive integer (0 if none)."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _config_dtype_bytes(config: Any) -> int:
    """Bytes per element of the config's ``dtype`` (2 when it names none)."""
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return _DTYPE_BYTES.get(str(dtype).removeprefix("torch."), 2)


def _transferred(calibration: dict[str, Any], template: str) -> dict[str, Any]:
    """The template's calibration as a transfer: its coefficients, none fitted, no measured rows."""
    method = calibration.get("method", "")
    return {
        "source": f"shipped card {template}",
        "method": f"derived from model.config (cpplan.spec.config_card): coefficients transferred from "
        f"{template}, not measured on this model ({template}: {method})",
        "notes": "the learned correction (Planner.observe) adapts it to what this model measures",
        "coefficients": calibration.get("coefficients", {}),
    }


def card_summary(card: ModelCard) -> str:
    """One line for a log: the card's geometry and, for a derived card, the shipped card its floors
    came from."""
    g = card.geometry
    counts = g.layer_counts(g.num_layers)
    parts = [f"hidden {g.hidden}", f"{g.num_layers} layers"]
    if counts["gdn_layers"]:
        parts[-1] += f" ({counts['gdn_layers']} GDN, {counts['attn_layers']} attention)"
    parts.append(f"{g.num_heads}/{g.num_kv_heads} heads x {g.head_dim}")
    parts.append(f"{g.num_experts} experts top-{g.top_k}" if g.num_experts else f"FFN {g.ffn}")
    parts += [f"vocab {g.vocab}", f"{g.dtype_bytes} B per element"]
    source = card.calibration.source if card.calibration else ""
    if source.startswith("shipped card "):
        parts.append(f"floors and costs of {source.removeprefix('shipped card ')}")
    return ", ".join(parts)


__all__ = ["TEMPLATES", "card_from_config", "card_summary", "segment_formula", "segment_tokens"]
