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
    completion_masks,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    random_masks,
    random_tree_workload,
    tiny_model,
    with_loss_masks,
    zigzag,
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


def test_workload_requests_supply_the_default_masks():
    """By default a workload request's own counted targets (``predicted()``) are its mask: its
    ``loss_mask`` shifted by one, every entry without one, none when its output is not the loss; an
    explicit mask wins; log-probs that do not fit the request are a ValueError naming it."""
    requests = (
        cpplan.Request(tokens=[5, 6, 7, 8, 9], loss_mask=[0, 0, 1, 1, 0]),
        cpplan.Request(tokens=[5, 6, 7]),
        cpplan.Request(tokens=[5, 6, 7, 8], output="logits", loss_mask=[1, 1, 1, 1]),
    )
    workload = cpplan.Workload(items=(cpplan.Item(id="a", requests=requests),))
    values = {("a", 0): _values()[("a", 0)], ("a", 1): _values()[("a", 1)], ("a", 2): _values()[("b", 0)]}
    masks = loss_masks(values, workload)
    assert [masks[k].tolist() for k in values] == [[0, 1, 1, 0], [1, 1], [0, 0, 0]]
    assert loss_masks(values, workload, {("a", 0): [0, 1, 1, 1, 1]})[("a", 0)].tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match=r"log-probs of \('a', 1\) have 4 entries"):
        loss_masks({("a", 1): _values()[("a", 0)]}, workload)
    with pytest.raises(ValueError, match="no such request"):
        loss_masks({("a", 3): _values()[("a", 0)]}, workload)


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


@pytest.fixture(scope="module")
def runs():
    """Packed (CP 2) and unpacked log-probs, on the hybrid MoE model, of the mixed workload whose
    requests carry completion-only loss masks (every token of the chain, the second half of the lone
    request)."""
    workload = with_loss_masks(mixed_workload(0, scale=0.6), completion_masks)
    model = tiny_model("qwen3_5_moe")
    with float64_internals():
        packed = packed_logprobs(model, plan(workload, 2), workload, wave=0)
        unpacked = unpacked_logprobs(model, workload)
    return model, workload, packed, unpacked


def _losses_and_grads(model, runs_logprobs, weights, reduction, workload):
    """Each log-prob set's policy loss under the workload's own masks, and its parameter gradients."""
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad], strict=True)
    losses, grads = [], []
    with float64_internals():
        for logprobs in runs_logprobs:
            loss = policy_loss(logprobs, weights, reduction=reduction, workload=workload)
            losses.append(loss)
            found = torch.autograd.grad(loss, params, retain_graph=True, materialize_grads=True)
            grads.append(dict(zip(names, found, strict=True)))
    return losses, grads


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_packed_loss_equals_unpacked(runs, reduction):
    """Each reduction with per-token weights (advantage-like, varying by request and token) under the
    workload's completion-only masks gives the same loss (1e-12 relative) and parameter gradients
    (1e-8 of each parameter's largest entry) from packed and unpacked log-probs."""
    model, workload, packed, unpacked = runs
    rng = np.random.default_rng(0)
    weights = {k: torch.as_tensor(rng.normal(size=v.numel())) for k, v in unpacked.items()}
    losses, grads = _losses_and_grads(model, (packed, unpacked), weights, reduction, workload)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=0)
    assert max_rel_grad_diff(grads[0], grads[1]) <= 1e-8


def test_default_masks_count_what_materialize_lists(runs):
    """The workload's masks select exactly materialize's loss pairs: over every CP rank, the summed
    ``weight x -log p`` at the pairs (each pair's value read from the unpacked run of a request
    through it) equals the packed token-sum loss (``sequence_mean_token_sum`` with denominator 1),
    and the pairs' total weight is the counted tokens."""
    _, workload, packed, unpacked = runs
    result = plan(workload, 2)
    batches = cpplan.materialize_wave(result, workload, wave=0)
    value = {}
    for k, key in enumerate(batches[0].requests):
        readback = batches[0].readback(k).tolist()
        tokens = workload.items[workload.index_of[key[0]]].requests[key[1]].tokens.tolist()
        for t, lp in enumerate(unpacked[key].tolist()):
            value[(readback[t], tokens[t + 1])] = lp
    total, weight = 0.0, 0
    for b in batches:
        positions = b.packed_index[b.loss_index].tolist()
        for p, target, w in zip(positions, b.loss_targets.tolist(), b.loss_weights.tolist(), strict=True):
            total -= w * value[(p, target)]
            weight += w
    masks = loss_masks(packed, workload)
    assert weight == loss_denominators(masks)["tokens"] < sum(v.numel() for v in packed.values())
    summed = policy_loss(packed, reduction="sequence_mean_token_sum", workload=workload, denominator=1)
    assert float(summed.detach()) == pytest.approx(total, rel=1e-12)


@pytest.mark.parametrize(("seed", "cp"), [(4, 2), (5, 4)])
def test_random_masked_trees(seed, cp):
    """Random prefix trees whose requests carry random loss masks, planned at CP ``cp`` with zigzag
    chunks: every reduction gives the same loss (1e-12 relative) and gradients packed and unpacked
    (each entry within 1e-8 relative, or 1e-12 of the model's largest gradient entry: with masks some
    GDN decay gradients cancel to ~1e-10 of the largest, where float64 rounding of their terms is
    ~1e-17)."""
    workload = with_loss_masks(random_tree_workload(seed), random_masks(seed))
    model = tiny_model("qwen3_5_moe", seed=seed)
    with float64_internals():
        packed = packed_logprobs(model, zigzag(plan(workload, cp), cp), workload, wave=0)
        unpacked = unpacked_logprobs(model, workload)
    rng = np.random.default_rng(seed)
    weights = {k: torch.as_tensor(rng.normal(size=v.numel())) for k, v in unpacked.items()}
    for reduction in REDUCTIONS:
        losses, grads = _losses_and_grads(model, (packed, unpacked), weights, reduction, workload)
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=0)
        largest = max(float(g.abs().max()) for g in grads[1].values())
        for name, want in grads[1].items():
            torch.testing.assert_close(grads[0][name], want, rtol=1e-8, atol=1e-12 * largest, msg=name)


def test_unknown_reduction_is_refused():
    """An unknown reduction name is a ValueError listing the known ones."""
    with pytest.raises(ValueError, match="reduction must be one of"):
        policy_loss(_values(), reduction="mean")
