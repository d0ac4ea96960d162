"""What a CP rank without tokens runs, in one process: its MoE blocks and token mixers on zero rows give
every trainable parameter a gradient of exactly zero (the gloo runs of tests/hf/test_hf_fsdp_scattered.py
show the whole wave exact under FSDP2 and DDP)."""

from __future__ import annotations

import torch

from cpplan.hf.decoder_routing import adapt
from cpplan.hf.module_calls import idle_forward, zero_touch
from tests.support.hf_models import one_thread, tiny_model  # noqa: F401 (autouse fixture)


def _first_layer(kind: str):
    lm = adapt(tiny_model("qwen3_5_moe").train())
    return next(layer for layer in lm.layers if layer.kind == kind)


def test_idle_moe_block_gives_every_parameter_a_zero_gradient():
    """A MoE block on zero rows routes no token, so its own forward leaves its experts without a
    gradient; :func:`idle_forward` returns the same empty output and every trainable parameter of the
    block gets a gradient, all zero."""
    mlp = _first_layer("gdn").mlp
    rows = torch.zeros((1, 0, mlp.gate.weight.shape[1]), dtype=torch.float64, requires_grad=True)
    mlp(rows).sum().backward()
    assert any(p.grad is None for p in mlp.parameters())
    mlp.zero_grad(set_to_none=True)
    out = idle_forward(mlp)(rows)
    assert out.shape == rows.shape
    out.sum().backward()
    grads = [p.grad for p in mlp.parameters() if p.requires_grad]
    assert grads and all(g is not None and not g.any() for g in grads)


def test_zero_touch_of_a_gated_deltanet_layer_reaches_its_decay_parameters():
    """:func:`zero_touch` of a Gated DeltaNet mixer is a scalar 0 whose backward gives every trainable
    parameter (the decay ``A_log`` and ``dt_bias`` included, which a layer running no recurrence never
    reads) a gradient of exactly zero."""
    gdn = _first_layer("gdn").mixer
    touch = zero_touch(gdn)
    assert touch.shape == () and float(touch) == 0.0
    touch.backward()
    named = {name: p.grad for name, p in gdn.named_parameters() if p.requires_grad}
    assert {"A_log", "dt_bias"} <= named.keys()
    assert all(g is not None and not g.any() for g in named.values())
