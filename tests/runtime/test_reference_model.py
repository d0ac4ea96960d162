"""The reference model proves the layout: packed equals alone, CP-sharded equals unsharded.

Everything runs in float64. Tolerance: logits and the summed loss within ``rtol=1e-9, atol=1e-10``,
parameter gradients within ``rtol=1e-8, atol=1e-10`` (the observed differences are ~1e-15: only the
order of floating-point sums changes).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from cpplan import Item, Request, Workload
from cpplan.runtime.attention_mask import TreeMask, flex_attention_available
from cpplan.runtime.materialize import materialize_wave
from cpplan.runtime.reference_model import (
    ReferenceConfig,
    ReferenceLM,
    batch_loss,
    causal_mask,
    next_token_loss,
    run_alone,
    run_simulated_cp,
    run_wave,
    wave_tokens,
)
from tests.support.prefix_trees import LAYOUTS, build_problem, hand_plan, prefix_workloads

LOGITS = {"rtol": 1e-9, "atol": 1e-10}
GRADS = {"rtol": 1e-8, "atol": 1e-10}
VOCAB = 6


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The tensors here are tiny: on shared cores, intra-op threads cost more than the arithmetic."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(seed: int = 0, dtype=torch.float64) -> ReferenceLM:
    torch.manual_seed(seed)
    return ReferenceLM(ReferenceConfig(vocab_size=VOCAB, hidden=16, num_heads=2, num_layers=2, ffn=24)).to(
        dtype
    )


def _grads(model: ReferenceLM, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _requests(workload: Workload, batch):
    for k, (item_id, index) in enumerate(batch.requests):
        yield k, workload.items[workload.index_of[item_id]].requests[index]


def _alone(model, workload, batch):
    """Per-request logits run alone, and the summed loss over the loss requests."""
    logits, loss = {}, torch.zeros((), dtype=torch.float64)
    for k, request in _requests(workload, batch):
        tokens = torch.from_numpy(request.tokens.copy())
        logits[k] = run_alone(model, tokens)
        if request.output == "loss":
            loss = loss + next_token_loss(logits[k], tokens)
    return logits, loss


@settings(max_examples=60, deadline=None)
@given(workload=prefix_workloads(vocab=VOCAB), layout=st.sampled_from(LAYOUTS), cp=st.integers(1, 3))
def test_packed_wave_equals_each_request_alone(workload, layout, cp):
    """On any prefix tree and layout, the packed wave's logits at every request's read-back positions,
    the summed loss over all loss requests' targets, and its gradients with respect to every parameter
    equal running each request alone (float64; tolerances in the module docstring)."""
    problem = build_problem(workload, cp=cp, chunk_tokens=4)
    plan = hand_plan(problem, layout=layout, num_waves=1, owner_seed=None)
    batches = materialize_wave(plan, workload, wave=0)
    model = _model()
    packed = run_wave(model, batches)
    packed_loss = sum(batch_loss(packed[b.packed_index], b) for b in batches)
    alone, alone_loss = _alone(model, workload, batches[0])
    for k, logits in alone.items():
        torch.testing.assert_close(packed[batches[0].readback(k)], logits, **LOGITS)
    torch.testing.assert_close(packed_loss, alone_loss, **LOGITS)
    if alone_loss.requires_grad:
        packed_grads = _grads(model, packed_loss)
        for name, grad in _grads(model, alone_loss).items():
            torch.testing.assert_close(packed_grads[name], grad, **GRADS, msg=name)


def _masked_alone_loss(model, workload, batch) -> torch.Tensor:
    """Every request run alone, its next-token cross-entropy summed over the targets it counts."""
    loss = torch.zeros((), dtype=torch.float64)
    for _, request in _requests(workload, batch):
        counted = torch.from_numpy(request.predicted())
        if counted.any():
            tokens = torch.from_numpy(request.tokens.copy())
            terms = F.cross_entropy(run_alone(model, tokens)[:-1], tokens[1:], reduction="none")
            loss = loss + terms[counted].sum()
    return loss


@settings(max_examples=50, deadline=None)
@given(
    workload=prefix_workloads(vocab=VOCAB, masks=True),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 99),
)
def test_masked_loss_pairs_equal_each_requests_masked_loss(workload, layout, seed):
    """With random loss masks, summing ``weight x CE`` over every rank's loss pairs (ranks owning random
    chunks, each computing only its owned queries) equals, with its parameter gradients, the sum over
    requests of each one's masked next-token loss run alone."""
    problem = build_problem(workload, cp=3, chunk_tokens=4)
    batches = materialize_wave(
        hand_plan(problem, layout=layout, num_waves=1, owner_seed=seed), workload, wave=0
    )
    model = _model(seed=2)
    sharded = run_simulated_cp(model, batches)
    packed_loss = sum(batch_loss(logits, b) for b, logits in zip(batches, sharded, strict=True))
    alone_loss = _masked_alone_loss(model, workload, batches[0])
    torch.testing.assert_close(packed_loss, alone_loss, **LOGITS)
    if alone_loss.requires_grad:
        want = _grads(model, alone_loss)
        for name, grad in _grads(model, packed_loss).items():
            torch.testing.assert_close(grad, want[name], **GRADS, msg=name)


@settings(max_examples=50, deadline=None)
@given(
    workload=prefix_workloads(vocab=VOCAB, max_requests=5),
    layout=st.sampled_from(LAYOUTS),
    cp=st.integers(2, 4),
    seed=st.integers(0, 2**16),
)
def test_simulated_cp_equals_unsharded(workload, layout, cp, seed):
    """With ranks owning random chunks, each rank computing only its owned queries against keys and
    values rebuilt from all ranks gives, together, the unsharded logits, summed loss and parameter
    gradients."""
    problem = build_problem(workload, cp=cp, chunk_tokens=4)
    batches = materialize_wave(
        hand_plan(problem, layout=layout, num_waves=1, owner_seed=seed), workload, wave=0
    )
    model = _model(seed=1)
    full = run_wave(model, batches)
    full_loss = sum(batch_loss(full[b.packed_index], b) for b in batches)
    sharded = run_simulated_cp(model, batches)
    for b, logits in zip(batches, sharded, strict=True):
        assert logits.shape[0] == b.num_tokens
        torch.testing.assert_close(logits, full[b.packed_index], **LOGITS)
    sharded_loss = sum(batch_loss(logits, b) for b, logits in zip(batches, sharded, strict=True))
    torch.testing.assert_close(sharded_loss, full_loss, **LOGITS)
    if full_loss.requires_grad:
        want = _grads(model, full_loss)
        for name, grad in _grads(model, sharded_loss).items():
            torch.testing.assert_close(grad, want[name], **GRADS, msg=name)


def _siblings() -> Workload:
    """One prompt, two different completions: under full sharing the completions are sibling segments."""
    prompt = [1, 2, 3, 4, 5]
    return Workload(
        items=(
            Item(id="g", requests=(Request(tokens=[*prompt, 0, 1, 2]), Request(tokens=[*prompt, 3, 4, 5]))),
        )
    )


def test_plain_causal_mask_over_the_packed_sequence_is_wrong():
    """Control: the packed run with a plain causal mask (the second completion seeing the first) no
    longer matches running the request alone, so the equality above depends on the tree mask."""
    workload = _siblings()
    batches = materialize_wave(
        hand_plan(build_problem(workload, cp=1, chunk_tokens=4), layout="full", num_waves=1, owner_seed=None),
        workload,
        wave=0,
    )
    model = _model()
    input_ids, position_ids = wave_tokens(batches)
    leaky = model(input_ids, position_ids, causal_mask(input_ids.numel()))
    alone, _ = _alone(model, workload, batches[0])
    second = batches[0].readback(1)
    assert not torch.allclose(leaky[second], alone[1], **LOGITS)
    torch.testing.assert_close(run_wave(model, batches)[second], alone[1], **LOGITS)


def test_float32_within_stated_tolerance():
    """In float32 the packed and alone logits agree to within rtol=1e-5, atol=1e-5."""
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, VOCAB, 40).tolist()
    requests = tuple(Request(tokens=prompt + rng.integers(0, VOCAB, 25).tolist()) for _ in range(4))
    workload = Workload(items=(Item(id="g", requests=requests),))
    plan = hand_plan(
        build_problem(workload, cp=2, chunk_tokens=16), layout="full", num_waves=1, owner_seed=None
    )
    batches = materialize_wave(plan, workload, wave=0)
    model = _model(dtype=torch.float32)
    packed = run_wave(model, batches)
    for k, request in _requests(workload, batches[0]):
        alone = run_alone(model, torch.from_numpy(request.tokens.copy()))
        torch.testing.assert_close(packed[batches[0].readback(k)], alone, rtol=1e-5, atol=1e-5)


def test_token_outside_vocabulary_is_a_clear_error():
    """A token id the model cannot embed is a ValueError naming the id and the vocabulary size."""
    model = _model()
    with pytest.raises(ValueError, match="token id 9 is outside the reference model's vocabulary of 6"):
        run_alone(model, torch.tensor([1, 9]))


@pytest.mark.skipif(not flex_attention_available(), reason="torch has no flex_attention")
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_path_equals_dense_path():
    """The model run with flex_attention BlockMasks (16-token blocks) gives the dense-mask logits and
    summed loss (float64), for the whole wave and for each CP rank's owned queries against all keys
    (forward only: torch 2.13 has no flex_attention backward on CPU). torch's CPU path evaluates the
    mask_mod on every pair and ignores the block lists, so this checks the mask_mod and the model's
    flex plumbing; the block lists are checked block for block in test_materialize_mask."""
    workload = Workload(
        items=tuple(
            Item(
                id=f"g{g}",
                requests=tuple(Request(tokens=[g, *range(1, 5), g, k % VOCAB] * 6) for k in range(3)),
            )
            for g in range(2)
        )
    )
    plan = hand_plan(build_problem(workload, cp=2, chunk_tokens=8), layout="full", num_waves=1, owner_seed=5)
    batches = materialize_wave(plan, workload, wave=0)
    model = _model()
    input_ids, position_ids = wave_tokens(batches)
    wave_mask = TreeMask.for_batch(batches[0], queries="all")
    with torch.no_grad():
        dense = model(input_ids, position_ids, wave_mask.dense())
        flex = model(input_ids, position_ids, wave_mask.block_mask(block_size=16))
        sharded = run_simulated_cp(model, batches, block_size=16)
    torch.testing.assert_close(flex, dense, **LOGITS)
    losses = [sum(batch_loss(out[b.packed_index], b) for b in batches) for out in (dense, flex)]
    torch.testing.assert_close(losses[1], losses[0], **LOGITS)
    for b, logits in zip(batches, sharded, strict=True):
        torch.testing.assert_close(logits, dense[b.packed_index], **LOGITS)
