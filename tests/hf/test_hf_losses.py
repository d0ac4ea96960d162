"""RL loss reductions over per-request log-probs: their definitions, their masks, their cross-rank
denominators, and packed equals unpacked for each (value and gradients, float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cpplan
from cpplan.hf import (
    float64_internals,
    loss_denominators,
    loss_masks,
    packed_logprobs,
    policy_loss,
    sequence_mean_token_mean,
    sequence_mean_token_sum,
    token_mean,
    unpacked_logprobs,
)
from tests.support.hf_models import (
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    tiny_model,
)

REDUCTIONS = ["token_mean", "sequence_mean_token_mean", "sequence_mean_token_sum"]


def _values() -> dict:
    """Three requests' per-entry values (4, 2 and 3 predicted tokens)."""
    return {
        ("a", 0): torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64),
        ("a", 1): torch.tensor([10.0, 20.0], dtype=torch.float64),
        ("b", 0): torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64),
    }


def test_reductions_follow_their_definitions():
    """Token masks (length n, 1 where predicting that token counts) select entries shifted by one;
    token_mean divides by counted tokens, the sequence means by counted sequences (a sequence with no
    counted token is left out), matching sums written out by hand."""
    values = _values()
    token_masks = {("a", 0): [1, 0, 1, 1, 0], ("a", 1): [0, 0, 0], ("b", 0): [0, 1, 1, 1]}
    masks = loss_masks(values, masks=token_masks)
    assert masks[("a", 0)].tolist() == [0, 1, 1, 0]
    assert loss_denominators(masks) == {"tokens": 5, "sequences": 2}
    assert float(token_mean(values, masks)) == pytest.approx((2 + 3 - 1 - 2 - 3) / 5)
    assert float(sequence_mean_token_mean(values, masks)) == pytest.approx(((2 + 3) / 2 + (-6) / 3) / 2)
    assert float(sequence_mean_token_sum(values, masks)) == pytest.approx((5 - 6) / 2)


def test_token_zero_never_counts_and_default_counts_all():
    """Marking token 0 changes nothing (it is never predicted); without masks every entry counts."""
    values = _values()
    with_first = loss_masks(values, masks={("a", 0): [1, 1, 1, 1, 1]})
    without_first = loss_masks(values, masks={("a", 0): [0, 1, 1, 1, 1]})
    assert torch.equal(with_first[("a", 0)], without_first[("a", 0)])
    everything = loss_masks(values)
    assert loss_denominators(everything) == {"tokens": 9, "sequences": 3}


def test_request_loss_mask_attribute_is_the_default():
    """A workload request's ``loss_mask`` supplies the default mask; an explicit mask wins."""
    request = cpplan.Request(tokens=[5, 6, 7, 8, 9], loss_mask=[0, 0, 1, 1, 0])
    workload = cpplan.Workload(items=(cpplan.Item(id="a", requests=(request,)),))
    values = {("a", 0): _values()[("a", 0)]}
    assert loss_masks(values, workload)[("a", 0)].tolist() == [0, 1, 1, 0]
    assert loss_masks(values, workload, {("a", 0): [0, 1, 1, 1, 1]})[("a", 0)].tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("mask", [[1, 1], [0, 1, 2, 1, 1]], ids=["short", "not-binary"])
def test_bad_mask_is_refused(mask):
    """A mask of the wrong length or with values other than 0/1 is a ValueError naming the request."""
    with pytest.raises(ValueError, match=r"loss mask of \('a', 0\)"):
        loss_masks(_values(), masks={("a", 0): mask})


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_global_denominators_split_over_ranks(reduction):
    """Splitting the requests over two data-parallel ranks, each reducing its share with the
    all-reduced denominators, sums to the loss over all requests together."""
    values = _values()
    weights = {k: 0.5 + v.abs() / 10 for k, v in values.items()}
    masks = {("a", 0): [1, 1, 0, 1, 1], ("a", 1): [1, 1, 1], ("b", 0): [0, 0, 1, 1]}
    whole = policy_loss(values, weights, reduction=reduction, masks=masks)
    shares = [[("a", 0), ("b", 0)], [("a", 1)]]
    totals = {"tokens": 0, "sequences": 0}
    for share in shares:
        for name, count in loss_denominators(loss_masks({k: values[k] for k in share}, masks=masks)).items():
            totals[name] += count
    denominator = totals["tokens" if reduction == "token_mean" else "sequences"]
    split = sum(
        policy_loss(
            {k: values[k] for k in share}, weights, reduction=reduction, masks=masks, denominator=denominator
        )
        for share in shares
    )
    torch.testing.assert_close(split, whole, rtol=1e-12, atol=0)


def _completion_masks(workload: cpplan.Workload) -> dict:
    """Completion-only masks for the GRPO items (tokens after the shared prompt), every token of the
    others except the first half of the lone request."""
    masks = {}
    for item in workload.items:
        tokens = [r.tokens for r in item.requests]
        for k, t in enumerate(tokens):
            mask = np.ones(t.size, dtype=np.int64)
            if item.id.startswith("grpo"):
                others = [o for j, o in enumerate(tokens) if j != k]
                shared = max(int(np.argmin(np.r_[t[: o.size] == o[: t.size], False])) for o in others)
                mask[:shared] = 0
            elif item.id == "lone":
                mask[: t.size // 2] = 0
            masks[(item.id, k)] = mask
    return masks


@pytest.fixture(scope="module")
def runs():
    """Packed (CP 2) and unpacked log-probs of the mixed workload on the hybrid MoE model."""
    workload = mixed_workload(0, scale=0.6)
    model = tiny_model("qwen3_5_moe")
    with float64_internals():
        packed = packed_logprobs(model, plan(workload, 2), workload, wave=0)
        unpacked = unpacked_logprobs(model, workload)
    return model, workload, packed, unpacked


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_packed_loss_equals_unpacked(runs, reduction):
    """Each reduction with per-token weights (advantage-like, varying by request and token) and
    completion-only masks gives the same loss (1e-12 relative) and parameter gradients (1e-8 of each
    parameter's largest entry) from packed and unpacked log-probs."""
    model, workload, packed, unpacked = runs
    masks = _completion_masks(workload)
    rng = np.random.default_rng(0)
    weights = {k: torch.as_tensor(rng.normal(size=v.numel())) for k, v in unpacked.items()}
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad], strict=True)
    losses, grads = [], []
    with float64_internals():
        for logprobs in (packed, unpacked):
            loss = policy_loss(logprobs, weights, reduction=reduction, masks=masks, workload=workload)
            losses.append(loss)
            found = torch.autograd.grad(loss, params, retain_graph=True, materialize_grads=True)
            grads.append(dict(zip(names, found, strict=True)))
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=0)
    assert max_rel_grad_diff(grads[0], grads[1]) <= 1e-8


def test_unknown_reduction_is_refused():
    """An unknown reduction name is a ValueError listing the known ones."""
    with pytest.raises(ValueError, match="reduction must be one of"):
        policy_loss(_values(), reduction="mean")
