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


def _howto_config(**overrides):
    """The TRL how-to's tiny Qwen3 (docs/integrations.md), float32."""
    sizes = dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, head_dim=16
    )
    return transformers.Qwen3Config(vocab_size=63, num_key_value_heads=2, **(sizes | overrides))


def _grouped(prompt_length: int):
    """2 prompts of ``prompt_length`` tokens x 4 completions of 20 tokens, as the TRL adapter groups them."""
    from tests.support.grouped_rollouts import grouped_rollouts

    return grouped_rollouts(prompt_length)


def test_tiny_card_shares_a_prompt_where_the_measured_step_is_faster():
    """The how-to's tiny model, 64-token prompts (measured 1.33x faster shared,
    benchmarks/results/bench_sharing_overhead.json): the derived card plans each prompt stored once
    (packed tokens = logical less 3 copies of each prompt); with the template's per-segment price it
    stored every copy."""
    card = card_from_config(_howto_config(), dtype_bytes=4)
    workload = _grouped(64)
    plan = cpplan.Planner(model=card, memory_bytes="36GiB", solver="deterministic").plan(workload).plan
    assert plan.packed_tokens == plan.logical_tokens - 2 * 3 * 64
    template_priced = card.model_copy(
        update={
            "cost": card.cost.model_copy(
                update={
                    "terms": card.cost.terms
                    | {
                        "segments": card.cost.terms["segments"].model_copy(
                            update={"seconds_per_unit": "layers * 4e-6"}
                        )
                    }
                }
            )
        }
    )
    before = cpplan.Planner(model=template_priced, memory_bytes="36GiB", solver="deterministic").plan(
        workload
    )
    assert before.plan.packed_tokens == before.plan.logical_tokens


def test_segment_cap_falls_with_size_and_leaves_realistic_cards_as_they_were():
    """The cap in tokens is the measured 75 at the tiny size, falls with size to its floor; a
    Qwen3-0.6B config's per-segment seconds are the template's (layers x 4e-6), the tiny config's far
    below it."""
    from cpplan.spec.config_card import SEGMENT_TOKENS_FLOOR, segment_tokens

    assert segment_tokens(12_000) == pytest.approx(75.0)
    assert segment_tokens(48_000) == pytest.approx(37.5)
    assert segment_tokens(16e6) == SEGMENT_TOKENS_FLOOR
    small = transformers.Qwen3Config(
        hidden_size=1024,
        intermediate_size=3072,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        num_hidden_layers=28,
        vocab_size=151936,
        dtype="bfloat16",
    )
    for config, capped in ((small, False), (_howto_config(), True)):
        resolved = card_from_config(config).resolve(cpplan.Topology(), phase="cold")
        seconds = resolved.cost_seconds[resolved.cost_names.index("segments")]
        template = config.num_hidden_layers * 4e-6
        assert (seconds < template / 10) if capped else seconds == pytest.approx(template, rel=1e-12)
