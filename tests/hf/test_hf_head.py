"""The LM head of :func:`cpplan.hf.packed_logprobs` runs where the plan prices it: only at the
positions a log-prob is read (with ``positions="loss"``, only where the loss counts), one chunk of
positions at a time in forward and in backward, with the same log-probs and gradients as unpacked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cpplan
from cpplan.hf import float64_internals, packed_logprobs, policy_loss, unpacked_logprobs
from tests.support.hf_models import (
    completion_masks,
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    tiny_model,
    with_loss_masks,
)

LOGPROBS = 1e-9
GRADS = 1e-8


@pytest.fixture(scope="module")
def masked() -> cpplan.Workload:
    """GRPO groups with completion-only masks, a prefix chain and a lone request with half its tokens
    masked (small: ~1.3K packed tokens)."""
    return with_loss_masks(mixed_workload(1, scale=0.5), completion_masks)


class HeadRows:
    """Records how many positions every call of the LM head sees (forward and backward recompute)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: list[int] = []
        self.handle = model.get_output_embeddings().register_forward_hook(self._record)

    def _record(self, module, inputs, output) -> None:
        self.calls.append(int(np.prod(inputs[0].shape[:-1])))

    def close(self) -> None:
        self.handle.remove()


def _counted(workload: cpplan.Workload) -> int:
    return sum(int(r.predicted().sum()) for item in workload.items for r in item.requests)


def _entries(workload: cpplan.Workload) -> int:
    return sum(r.num_tokens - 1 for item in workload.items for r in item.requests)


def test_loss_positions_equal_unpacked_where_counted_and_zero_elsewhere(masked):
    """With ``positions="loss"`` the counted entries equal the unpacked log-probs, the others are 0,
    and the masked policy loss and every parameter gradient equal the unpacked run's (CP2)."""
    model = tiny_model("qwen3_5_moe")
    with float64_internals():
        want = unpacked_logprobs(model, masked)
        want_grads = gradients(model, policy_loss(want, workload=masked))
        got = packed_logprobs(model, plan(masked, 2), masked, wave=0, positions="loss")
        grads = gradients(model, policy_loss(got, workload=masked))
    masks = {
        (item.id, k): torch.as_tensor(r.predicted(), dtype=torch.float64)
        for item in masked.items
        for k, r in enumerate(item.requests)
    }
    assert (
        max_abs_diff({k: v * masks[k] for k, v in got.items()}, {k: v * masks[k] for k, v in want.items()})
        <= LOGPROBS
    )
    assert all(bool((v[masks[k] == 0] == 0).all()) for k, v in got.items())
    assert any(bool((masks[k] == 0).any()) for k in got)
    assert max_rel_grad_diff(grads, want_grads) <= GRADS


def test_the_head_sees_only_counted_positions_one_chunk_at_a_time(masked):
    """The LM head runs on exactly the counted positions with ``positions="loss"`` (every entry with
    ``"all"``), never on more than ``logits_chunk_tokens`` of them at once, forward or backward."""
    model = tiny_model("qwen3", layers=1)
    result = plan(masked, 2)
    rows = HeadRows(model)
    try:
        with float64_internals():
            logprobs = packed_logprobs(
                model, result, masked, wave=0, positions="loss", logits_chunk_tokens=64
            )
            forward = list(rows.calls)
            policy_loss(logprobs, workload=masked).backward()
        backward = rows.calls[len(forward) :]
        rows.calls.clear()
        with float64_internals():
            packed_logprobs(model, result, masked, wave=0, positions="all", logits_chunk_tokens=64)
        every = list(rows.calls)
    finally:
        rows.close()
    assert sum(forward) == _counted(masked) < _entries(masked)
    assert sum(every) == _entries(masked)
    assert max(forward + backward + every) <= 64
    assert sorted(backward) == sorted(forward)


def test_chunk_size_does_not_change_logprobs_or_gradients(masked):
    """Chunks of 7 positions give the log-probs and gradients of one chunk holding them all."""
    model = tiny_model("qwen3_5_moe", layers=2)
    result = plan(masked, 2)
    runs = []
    for chunk in (7, 1 << 20):
        with float64_internals():
            logprobs = packed_logprobs(model, result, masked, wave=0, logits_chunk_tokens=chunk)
            runs.append((logprobs, gradients(model, policy_loss(logprobs, workload=masked))))
    assert max_abs_diff(runs[0][0], runs[1][0]) <= 1e-12
    assert max_rel_grad_diff(runs[0][1], runs[1][1]) <= 1e-12


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("positions", "targets"),
        ("logits_chunk_tokens", 0),
        ("logits_chunk_tokens", 2.5),
        ("logits_chunk_tokens", True),
    ],
)
def test_bad_head_options_are_refused(masked, option, value):
    """An unknown ``positions`` or a chunk size that is not a positive integer is a ValueError naming it."""
    model = tiny_model("qwen3", layers=1)
    with pytest.raises(ValueError, match=option):
        packed_logprobs(model, plan(masked, 1), masked, wave=0, **{option: value})
