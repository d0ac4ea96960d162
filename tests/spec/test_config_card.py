"""Cards derived from a transformers config (cpplan.spec.config_card): a config with a shipped card's
geometry gives that card's floors and costs, tiny configs of every family give valid cards that price a
short request in MiB, and configs no card can price are refused by name."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import cpplan
from cpplan.gpu_check.tiny_models import FAMILIES, tiny_config
from cpplan.spec.config_card import card_from_config, card_summary

transformers = pytest.importorskip("transformers")

HYBRID = ["linear_attention"] * 3 + ["full_attention"]
SHIPPED = {
    "qwen3-8b": (
        "Qwen3Config",
        {"hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8}
        | {"head_dim": 128, "num_hidden_layers": 36, "vocab_size": 151936, "max_position_embeddings": 131072},
    ),
    "qwen3-30b-a3b": (
        "Qwen3MoeConfig",
        {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
        | {
            "num_hidden_layers": 48,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
        }
        | {"vocab_size": 151936, "max_position_embeddings": 131072},
    ),
    "qwen3.5-27b": (
        "Qwen3_5TextConfig",
        {"hidden_size": 5120, "intermediate_size": 17408, "num_attention_heads": 24, "num_key_value_heads": 4}
        | {"head_dim": 256, "num_hidden_layers": 64, "layer_types": HYBRID * 16, "linear_num_value_heads": 48}
        | {"linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128}
        | {"linear_conv_kernel_dim": 4, "vocab_size": 248320, "max_position_embeddings": 262144},
    ),
    "qwen3.6-35b-a3b": (
        "Qwen3_5MoeTextConfig",
        {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256}
        | {"num_hidden_layers": 40, "layer_types": HYBRID * 10, "num_experts": 256, "num_experts_per_tok": 8}
        | {"moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "linear_num_value_heads": 32}
        | {"linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128}
        | {"linear_conv_kernel_dim": 4, "vocab_size": 248320, "max_position_embeddings": 262144},
    ),
}


def resolved_numbers(card, topology: cpplan.Topology) -> list[np.ndarray]:
    """Every number a resolved card prices with (floors, statics, costs, wave terms)."""
    r = card.resolve(topology, phase="cold")
    return [r.term_bytes, r.envelope_static_bytes, r.cost_seconds, r.wave_term_seconds, r.step_term_seconds]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_geometry_gives_the_shipped_cards_numbers(name):
    """A config with a shipped card's geometry (bf16) derives a card of the same family whose resolved
    floors, statics and costs equal the shipped card's at CP1 and CP2 (so the derivation reads every
    geometry field the formulas use, and picks the family's floors)."""
    class_name, values = SHIPPED[name]
    config = getattr(transformers, class_name)(**values, dtype="bfloat16")
    derived, shipped = card_from_config(config), cpplan.load_model(name)
    assert derived.geometry == shipped.geometry.model_copy(update={"dtype_bytes": 2})
    assert name in card_summary(derived) and "from-config" in derived.name
    supported = [cpplan.Topology(), cpplan.Topology(cp=2)]
    for topology in supported:
        for ours, theirs in zip(
            resolved_numbers(derived, topology), resolved_numbers(shipped, topology), strict=True
        ):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_configs_price_a_short_request_in_mib(family):
    """Each tiny family (dense, MoE, hybrid GDN dense and MoE) derives a valid card that plans a 216-token
    request below 1 GiB (the 256 MiB workspace and little else), where the Qwen3.6-35B-A3B card prices it
    at over 5 GiB; the hybrids' layer pattern is the config's GDN/attention period."""
    config = tiny_config(family, layers=4)
    card = card_from_config(config, dtype_bytes=4)
    hybrid = family.startswith("qwen3_5")
    assert card.geometry.layer_pattern == (("gdn", "gdn", "gdn", "attention") if hybrid else ("attention",))
    assert (card.geometry.num_experts > 0) == family.endswith("moe")
    workload = cpplan.Workload(
        items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=[t % 64 for t in range(216)]),)),)
    )
    solver = cpplan.load_solver("deterministic")

    def peak(model) -> int:
        result = cpplan.plan(workload, model=model, memory_bytes=80 * 2**30, solver=solver)
        return result.to_dict()["waves"][0]["ranks"][0]["peak_bytes"]

    assert 2**28 < peak(card) < 2**30 < 5 * 2**30 < peak("qwen3.6-35b-a3b")


def test_unpriceable_configs_are_refused_by_name():
    """A config missing a size, or mixing dense MLP layers into an MoE stack, is a ValueError naming it."""
    fields = {k: v for k, v in tiny_config("qwen3").to_dict().items() if k != "hidden_size"}
    with pytest.raises(ValueError, match=r"config\.hidden_size must be a positive integer"):
        card_from_config(SimpleNamespace(**fields))
    with pytest.raises(ValueError, match="which no card prices"):
        card_from_config(SimpleNamespace(**(fields | {"hidden_size": 32, "layer_types": ["mamba"] * 4})))
    moe = tiny_config("qwen3_moe")
    moe.mlp_only_layers = [0]
    with pytest.raises(ValueError, match="mlp_only_layers"):
        card_from_config(moe)
