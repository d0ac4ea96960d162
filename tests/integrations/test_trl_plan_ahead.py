"""The TRL adapter plans the next buffered batch ahead: which batch is next, and that its key and
workload are the ones the loss pass of that batch looks up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("trl")

from cpplan.integrations.trl.grpo_trainer import next_buffered_batch, padded_rows, pass_workload


def batch(offset: int) -> dict:
    """TRL's tensors for two rows: left-padded prompts, right-padded completions."""
    return {
        "prompt_ids": torch.tensor([[0, 5 + offset, 6], [7, 8, 9]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
        "completion_ids": torch.tensor([[11, 12, 0], [13, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
    }


def trainer(step: int, steps_per_generation: int = 3, num_iterations: int = 1) -> SimpleNamespace:
    """The fields of a GRPOTrainer that say which buffered batch comes next."""
    return SimpleNamespace(
        _buffered_inputs=[batch(k) for k in range(steps_per_generation)],
        _step=step,
        args=SimpleNamespace(steps_per_generation=steps_per_generation),
        num_iterations=num_iterations,
    )


def test_the_next_buffered_batch_is_the_one_the_next_step_takes():
    """At step s the next step takes buffer slot (s + 1) mod steps_per_generation, unless it generates
    anew (every steps_per_generation * num_iterations steps) or nothing is buffered."""
    assert torch.equal(next_buffered_batch(trainer(0))["prompt_ids"], batch(1)["prompt_ids"])
    assert torch.equal(next_buffered_batch(trainer(1))["prompt_ids"], batch(2)["prompt_ids"])
    assert next_buffered_batch(trainer(2)) is None  # step 3 generates
    assert torch.equal(
        next_buffered_batch(trainer(2, num_iterations=2))["prompt_ids"], batch(0)["prompt_ids"]
    )
    assert next_buffered_batch(SimpleNamespace(_buffered_inputs=None)) is None


def test_the_plan_ahead_key_is_the_loss_pass_key():
    """The key pass_workload gives a buffered batch is the loss pass's key for it (its padded rows and
    whether empty rows join), and its workload holds every completion token of the batch."""
    inputs = batch(0)
    key, workload = pass_workload(inputs, keep_empty=False)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    assert key == (tuple(padded_rows(input_ids, mask, 3)), False)
    assert sum(len(r.tokens) for _, _, r in workload.requests()) == (2 + 2) + (3 + 1)
    empty = {**inputs, "completion_mask": torch.zeros_like(inputs["completion_mask"])}
    assert pass_workload(empty, keep_empty=False) is None
