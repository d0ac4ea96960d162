"""The "Use it in a trainer" walk-through in README.md runs exactly as written (it builds its own tiny
random Qwen3.5-MoE and optimizer): its masked loss equals the unpacked loss, the optimizer step trains,
and the rank it materializes owns tokens whose loss pairs, over both CP ranks, count exactly the masked
tokens."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import cpplan
from cpplan.hf import policy_loss, unpacked_logprobs
from tests.support.hf_models import one_thread  # noqa: F401 (autouse fixture)

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough_code() -> str:
    """The first Python block of the README's "Use it in a trainer" section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use it in a trainer") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None, "the walk-through has no python block"
    return match.group(1)


def model_prefix(code: str) -> str:
    """The block's lines up to and including the optimizer: what builds the (seeded) model."""
    lines = code.splitlines()
    last = next(i for i, line in enumerate(lines) if line.startswith("optimizer = "))
    return "\n".join(lines[: last + 1])


def test_readme_walkthrough_runs_and_its_loss_is_the_unpacked_masked_loss(capsys):
    """Executed exactly as the README has it, the block plans one wave; its loss equals the token-mean
    policy loss of the requests run alone (unpacked) on the same seeded model under their completion
    masks, the step changes the weights, the rank it materializes owns tokens, and the two CP ranks'
    materialized loss weights sum to the counted completion tokens. It prints that loss for its wave and
    the tokens packing saved (logical less packed, more than zero: the prompt is stored once)."""
    code = walkthrough_code()
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    printed = capsys.readouterr().out.splitlines()
    plan = scope["result"].plan
    saved = plan.logical_tokens - plan.packed_tokens
    assert saved > 0
    assert printed == [
        f"wave 0: loss {scope['loss'].item():.6f}",
        f"tokens: {plan.packed_tokens} packed for {plan.logical_tokens} logical ({saved} saved by sharing "
        "the prompt)",
    ]
    fresh: dict = {}
    exec(compile(model_prefix(code), str(README), "exec"), fresh)
    before = fresh["model"]
    want = policy_loss(
        unpacked_logprobs(before, scope["workload"]),
        scope["advantages"],
        workload=scope["workload"],
        denominator=scope["counted"],
    )
    assert scope["result"].plan.num_waves == 1
    torch.testing.assert_close(scope["loss"].detach().to(want.dtype), want.detach(), rtol=1e-5, atol=1e-6)
    pairs = zip(scope["model"].parameters(), before.parameters(), strict=True)
    moved = [not torch.equal(a, b) for a, b in pairs]
    assert any(moved)
    assert scope["batch"].input_ids.numel() > 0
    weights = sum(
        int(b.loss_weights.sum()) for b in cpplan.materialize_wave(scope["result"], scope["workload"], wave=0)
    )
    assert weights == scope["counted"] == sum(len(c) for c in scope["completions"])
