"""Layer scaling: what is live while the backward runs through a layer, and how the peak grows with depth."""

from __future__ import annotations

import numpy as np
import pytest

from cpplan import Topology, load_model
from cpplan.pricing.evaluator import envelope_bytes
from cpplan.spec.card import Geometry
from cpplan.spec.quantities import QUANTITY_INDEX, QUANTITY_NAMES

MODEL = "qwen3.6-35b-a3b"
LORA_LAYER_BYTES = 4 * 16 * (256 * 3 * 2560 + 3 * 2560 + 4096 + 128 * 128)
KINDS = {"attention": ("attn", "attention"), "gdn": ("gdn", "gdn")}


def _quantities(tokens: int, segments: int, cp: int) -> np.ndarray:
    q = np.zeros(len(QUANTITY_NAMES))
    for name in ("tokens", "grad_tokens", "loss_tokens"):
        q[QUANTITY_INDEX[name]] = tokens
    q[QUANTITY_INDEX["segments"]] = segments
    q[QUANTITY_INDEX["remote_tokens"]] = tokens * (cp - 1)
    q[QUANTITY_INDEX["attn_pairs"]] = q[QUANTITY_INDEX["grad_attn_pairs"]] = tokens * 1000
    return q


def _raw(card, topology, layers, q) -> dict[str, float]:
    resolved = card.resolve(topology, num_layers=layers, phase="cold")
    values = envelope_bytes(resolved, q)[0]
    return dict(zip(resolved.envelope_names, values.tolist(), strict=True))


def _at_layer(geometry: Geometry, num_layers: int, layer: int) -> dict[str, int]:
    """Positions as if the top layer of ``layer``'s kind were ``layer``: the layers at or below it held,
    those at or above it done (the other kind's positions empty)."""
    kinds = [geometry.layer_pattern[i % len(geometry.layer_pattern)] for i in range(num_layers)]
    out = {f"{k}_{p}_{c}": 0 for k in ("attn", "gdn") for p in ("top", "bottom") for c in _COUNTS}
    short = KINDS[kinds[layer]][0]
    held = kinds[: layer + 1]
    out[f"{short}_top_held_layers"] = len(held)
    out[f"{short}_top_held_gdn_layers"] = held.count("gdn")
    out[f"{short}_top_done_layers"] = num_layers - layer
    return out


_COUNTS = ("held_layers", "held_gdn_layers", "done_layers")


@pytest.mark.parametrize(("name", "layers"), [(MODEL, 8), (MODEL, 40), (MODEL, 11), ("qwen3-8b", 36)])
@pytest.mark.parametrize(("tokens", "segments"), [(2_000, 3), (30_000, 40), (195_000, 10)])
def test_layer_envelopes_are_the_largest_layer_in_backward(monkeypatch, name, layers, tokens, segments):
    """The card's top and bottom envelopes of each layer kind give exactly the largest peak over every
    layer the backward runs through (held inputs of the layers at or below it, LoRA gradients of the
    layers at or above it), for short and long waves, at full and truncated depth."""
    card = load_model(name)
    topology = Topology(cp=2)
    q = _quantities(tokens, segments, topology.cp)
    real = _raw(card, topology, layers, q)
    expected = max(v for e, v in real.items() if e != "head")
    seen = []
    for layer in range(layers):
        kind = card.geometry.layer_pattern[layer % len(card.geometry.layer_pattern)]
        positions = _at_layer(card.geometry, layers, layer)
        monkeypatch.setattr(Geometry, "layer_positions", lambda self, n, p=positions: p)
        seen.append(_raw(card, topology, layers, q)[f"{KINDS[kind][1]}_top"])
    assert max(seen) == pytest.approx(expected, rel=1e-12)


def test_lora_gradients_exist_only_for_layers_already_in_backward():
    """At 40 layers the top attention layer (first in backward) holds one layer's fp32 LoRA gradients,
    127,631,360 B; the bottom GDN layer (last in backward) every layer's, 40 times that; the head none."""
    resolved = load_model(MODEL).resolve(Topology(cp=4), phase="cold")
    static = dict(zip(resolved.envelope_names, resolved.envelope_static_bytes.tolist(), strict=True))
    workspace = 2**28
    assert LORA_LAYER_BYTES == 127_631_360
    assert static["attention_top"] == workspace + LORA_LAYER_BYTES
    assert static["gdn_bottom"] == workspace + 40 * LORA_LAYER_BYTES
    assert static["head"] == workspace + 1024 * 248_320 * 10


def test_depth_growth_is_held_inputs_routing_and_gdn_states_only():
    """For the same rank quantities at CP4, the top attention envelope grows from 8 to 40 layers by the
    32 more layers' checkpointed inputs and routing (32 x (4,096 + 416) B per token) and the 24 more GDN
    layers' entry states (24 x 2,146,304 B per segment): no LoRA gradient is added (the old card added
    32 x 127.6 MB)."""
    card = load_model(MODEL)
    topology = Topology(cp=4)
    q = _quantities(49_792, 3, topology.cp)
    growth = _raw(card, topology, 40, q)["attention_top"] - _raw(card, topology, 8, q)["attention_top"]
    assert growth == pytest.approx(32 * (4_096 + 416) * 49_792 + 24 * 2_146_304 * 3, rel=1e-12)
