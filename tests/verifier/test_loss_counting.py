"""The verifier counts loss tokens itself from the requests' loss masks and checks the plan's claims."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import cpplan
from cpplan.bench import synthetic
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.verifier import verify_plan
from cpplan.verifier.chains import masked_logits_needed


def _completion_only(wl: cpplan.Workload, shared: int) -> cpplan.Workload:
    """Every request's mask marks its tokens after the first ``shared``."""
    return cpplan.Workload(
        items=tuple(
            cpplan.Item(
                id=item.id,
                requests=tuple(
                    cpplan.Request(tokens=r.tokens, loss_mask=(np.arange(r.num_tokens) >= shared).astype(int))
                    for r in item.requests
                ),
            )
            for item in wl.items
        )
    )


@pytest.fixture(scope="module")
def masked_plan():
    """A CP2 plan (runtime profile) of a completion-only GRPO workload, its JSON and the workload."""
    plain = synthetic.grpo(
        num_prompts=3, group_size=4, system_tokens=100, prompt_tokens=300, completion_tokens=(50, 200)
    )
    workload = _completion_only(plain, 400)
    result = cpplan.plan(workload, topology=cpplan.Topology(cp=2), model="qwen3-8b", memory_bytes=80 * 2**30)
    return result, plan_to_dict(result.problem, result.plan), workload, plain


def test_masked_plan_verifies_and_counts_completions(masked_plan):
    """The runtime profile's plan of the masked workload passes; its loss tokens are the completion
    tokens (each completion's tokens from the one predicting its first token, a branch point's last
    prompt token counted once), fewer than its packed tokens."""
    result, data, workload, _ = masked_plan
    verdict = verify_plan(data, workload, result.problem.card, result.problem.memory_bytes)
    assert verdict.valid, verdict.violations
    loss = sum(r["loss_tokens"] for w in data["waves"] for r in w["ranks"])
    completions = sum(r.num_tokens - 400 for _, _, r in workload.requests())
    branch_points = sum(len(w["items"]) for w in data["waves"])
    assert loss == completions - sum(len(i.requests) for i in workload.items) + branch_points
    assert loss < sum(w["packed_tokens"] for w in data["waves"])


def test_a_false_loss_tokens_claim_is_caught(masked_plan):
    """A plan claiming a rank's loss tokens other than the verifier's own count is reported."""
    result, data, workload, _ = masked_plan
    bad = copy.deepcopy(data)
    bad["waves"][0]["ranks"][0]["loss_tokens"] += 1
    verdict = verify_plan(bad, workload, result.problem.card, result.problem.memory_bytes)
    assert not verdict.valid
    assert any("loss_tokens" in v for v in verdict.violations), verdict.violations


def test_the_masks_are_read_from_the_workload(masked_plan):
    """The masked plan checked against the same requests without masks is refused: the verifier counts
    every token's logits as needed there, so the plan's loss tokens (and peaks) disagree."""
    result, data, _, plain = masked_plan
    verdict = verify_plan(data, plain, result.problem.card, result.problem.memory_bytes)
    assert not verdict.valid
    assert any("loss_tokens" in v for v in verdict.violations), verdict.violations


def test_masked_needs_are_the_shifted_mask():
    """A loss request with a mask needs token t's logits where the mask marks token t + 1; other
    requests (no mask, or an output other than loss) are left to the per-segment flag."""
    request = cpplan.Request(tokens=[5, 6, 7, 8], loss_mask=[1, 0, 1, 1])
    assert masked_logits_needed(request).tolist() == [False, True, True, False]
    assert masked_logits_needed(cpplan.Request(tokens=[5, 6])) is None
    assert masked_logits_needed(cpplan.Request(tokens=[5, 6], output="logits", loss_mask=[0, 1])) is None
