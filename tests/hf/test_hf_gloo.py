"""cpplan.hf over real processes: one gloo process per CP rank (2 and 4 on 127.0.0.1) exchanging keys,
values, conv tails and recurrent states with collectives; every rank's log-probs and the summed
parameter gradients equal the unpacked run (float64 under float64_internals: log-probs within 1e-9,
gradients within 1e-8 of each parameter's largest entry)."""

from __future__ import annotations

import pytest
import torch

from cpplan.hf import float64_internals, unpacked_logprobs
from tests.support import hf_gloo_worker
from tests.support.hf_models import (
    completion_masks,
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    tiny_model,
    weighted_sum,
    with_loss_masks,
)
from tests.support.hf_spawn import spawn_ranks

pytestmark = pytest.mark.slow
DEADLINE_S = 150


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The model's state dict on disk (for the workers) and its unpacked log-probs and gradients."""
    folder = tmp_path_factory.mktemp("model")
    model = tiny_model("qwen3_5_moe")
    torch.save(model.state_dict(), folder / "model.pt")
    with float64_internals():
        logprobs = unpacked_logprobs(model, mixed_workload(0))
        grads = gradients(model, weighted_sum(logprobs))
        masked = with_loss_masks(mixed_workload(0), completion_masks)
        loss = hf_gloo_worker.masked_loss(unpacked_logprobs(model, masked), masked)
        masked_grads = gradients(model, loss)
    return folder, logprobs, grads, {"loss": loss.detach(), "grads": masked_grads}


@pytest.fixture(scope="module")
def spawned(reference):
    """Every rank's record for a world size, each world size run once for the module's tests."""
    cache: dict[int, list[dict]] = {}

    def get(world: int) -> list[dict]:
        if world not in cache:
            cache[world] = spawn_ranks(hf_gloo_worker.run, world, reference[0], deadline_s=DEADLINE_S)
        return cache[world]

    return get


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_ranks_equal_unpacked(reference, spawned, world):
    """With ``world`` processes, each holding one CP rank (planned ranges and zigzag chunks), every
    rank returns all requests' log-probs equal to the unpacked run, and the parameter gradients summed
    over the ranks equal the unpacked gradients (no rank hangs: the run is bounded)."""
    _, want, want_grads, _ = reference
    records = spawned(world)
    for ownership in ("planned", "zigzag"):
        for record in records:
            assert max_abs_diff(record[ownership]["logprobs"], want) <= 1e-9
        grads = records[0][ownership]["grads"]
        assert grads.keys() == want_grads.keys()
        assert max_rel_grad_diff(grads, want_grads) <= 1e-8
        for record in records[1:]:
            assert max_abs_diff(record[ownership]["grads"], grads) == 0.0


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_masked_policy_loss_equals_unpacked(reference, spawned, world):
    """With completion-only loss masks in the workload (planned with them), every rank's masked policy
    loss (the workload's own masks, per-request advantages) equals the unpacked loss, and the
    gradients summed over the ranks equal the unpacked gradients."""
    want = reference[3]
    records = spawned(world)
    for record in records:
        torch.testing.assert_close(record["masked"]["loss"], want["loss"], rtol=1e-12, atol=0)
    assert max_rel_grad_diff(records[0]["masked"]["grads"], want["grads"]) <= 1e-8
    for record in records[1:]:
        assert max_abs_diff(record["masked"]["grads"], records[0]["masked"]["grads"]) == 0.0


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_parallel_state_passing_equals_unpacked(reference, spawned, world):
    """With the GDN states passed in parallel (one all-gather of the affine maps per layer, planned
    ranges and zigzag chunks), every rank's log-probs and the summed gradients equal the unpacked run
    and the sequential rounds, the same on every rank."""
    _, want, want_grads, _ = reference
    records = spawned(world)
    for ownership in ("planned", "zigzag"):
        run = f"{ownership}_parallel"
        for record in records:
            assert max_abs_diff(record[run]["logprobs"], want) <= 1e-9
            assert max_abs_diff(record[run]["logprobs"], record[ownership]["logprobs"]) <= 1e-9
        grads = records[0][run]["grads"]
        assert max_rel_grad_diff(grads, want_grads) <= 1e-8
        assert max_rel_grad_diff(grads, records[0][ownership]["grads"]) <= 1e-8
        for record in records[1:]:
            assert max_abs_diff(record[run]["grads"], grads) == 0.0


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_head_parallel_equals_unpacked(reference, spawned, world):
    """Head-parallel (per GDN layer an all-to-all of the convolved rows to head shards and one of the
    outputs back, ``all_to_all_single`` over gloo; planned ranges and zigzag chunks), every rank's
    log-probs and the summed gradients equal the unpacked run, the rounds and parallel passing, the
    same on every rank."""
    _, want, want_grads, _ = reference
    records = spawned(world)
    for ownership in ("planned", "zigzag"):
        run = f"{ownership}_head_parallel"
        for record in records:
            assert max_abs_diff(record[run]["logprobs"], want) <= 1e-9
            for other in (ownership, f"{ownership}_parallel"):
                assert max_abs_diff(record[run]["logprobs"], record[other]["logprobs"]) <= 1e-9
        grads = records[0][run]["grads"]
        assert max_rel_grad_diff(grads, want_grads) <= 1e-8
        assert max_rel_grad_diff(grads, records[0][ownership]["grads"]) <= 1e-8
        for record in records[1:]:
            assert max_abs_diff(record[run]["grads"], grads) == 0.0
