"""The "Use it in a trainer" walk-through at the top of docs/hf.md runs as written on a tiny model: its
masked loss equals the unpacked loss, the optimizer step trains, and its materialized loss pairs count
exactly the masked tokens."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import torch

import cpplan
from cpplan.hf import float64_internals, policy_loss, unpacked_logprobs
from tests.support.hf_models import one_thread, tiny_model  # noqa: F401 (autouse fixture)

DOC = Path(__file__).resolve().parents[2] / "docs" / "hf.md"


def walkthrough_code() -> str:
    """The first Python block of the doc's "Use it in a trainer" section."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Use it in a trainer") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None, "the walk-through has no python block"
    return match.group(1)


def test_walkthrough_runs_and_its_loss_is_the_unpacked_masked_loss():
    """Executed with ``model`` a tiny random Qwen3.5-MoE (float64, float64 internals) and ``optimizer``
    SGD over its parameters: the block plans one wave, its loss equals the token-mean policy loss of the
    requests run alone under their completion masks (1e-12), the step changes the weights, and the two
    CP ranks' materialized loss weights sum to the counted completion tokens."""
    model = tiny_model("qwen3_5_moe").train()
    before = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    scope = {"model": model, "optimizer": optimizer}
    with float64_internals():
        exec(compile(walkthrough_code(), str(DOC), "exec"), scope)
        want = policy_loss(
            unpacked_logprobs(before, scope["workload"]),
            scope["advantages"],
            workload=scope["workload"],
            denominator=scope["counted"],
        )
    assert scope["result"].plan.num_waves == 1
    torch.testing.assert_close(scope["loss"].detach(), want.detach(), rtol=1e-12, atol=0)
    moved = [not torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters(), strict=True)]
    assert any(moved)
    weights = sum(
        int(b.loss_weights.sum()) for b in cpplan.materialize_wave(scope["result"], scope["workload"], wave=0)
    )
    assert weights == scope["counted"] == sum(len(c) for c in scope["completions"])
