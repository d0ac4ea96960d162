"""cpplan.hf inside a trainer's parallelism: four gloo processes as a dp=2 x cp=2 pool, the model wrapped
with FSDP2 (``fully_shard`` on each decoder layer and the root, over all four ranks), HSDP (over the 2-D
``(dp, cp)`` mesh) or DDP. Each rank runs its pool rank's waves of a four-wave step with
``packed_logprobs(..., distributed=True, group=mesh["cp"])`` and backpropagates the token-mean policy
loss over the step's counted tokens (all-reduced over DP); the wrapper's sum reduction then gives the
gradient of the whole step's loss computed unpacked in one process (float64 internals: within 1e-8 of
each parameter's largest entry; measured ~1e-12)."""

from __future__ import annotations

import pytest
import torch

import cpplan
from cpplan.hf import float64_internals, unpacked_logprobs
from tests.support import hf_fsdp_worker
from tests.support.hf_models import (
    gradients,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    tiny_model,
)
from tests.support.hf_spawn import spawn_ranks

pytestmark = pytest.mark.slow
WORLD = hf_fsdp_worker.DP * hf_fsdp_worker.CP
GRADS = 1e-8


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """The model on disk, the step's unpacked loss and gradients, and every rank's record."""
    folder = tmp_path_factory.mktemp("fsdp")
    model = tiny_model("qwen3_5_moe").train()
    torch.save(model.state_dict(), folder / "model.pt")
    workload = mixed_workload(0)
    with float64_internals():
        loss = hf_fsdp_worker.step_loss(unpacked_logprobs(model, workload), workload, None)
        grads = gradients(model, loss)
    records = spawn_ranks(hf_fsdp_worker.run, WORLD, folder, preload=["tests.support.hf_fsdp_worker"])
    return workload, loss.detach(), grads, records


def test_step_spreads_equal_waves_over_replicas(step):
    """The step's plan runs two waves on each DP replica (its two CP ranks run the same waves), so every
    rank runs the same number of forwards, as FSDP requires; the four waves are each run once."""
    workload, _, _, records = step
    result = hf_fsdp_worker.step_plan(workload)
    assert result.plan.num_waves == 4
    per_rank = [[w for w, _ in cpplan.pool_waves(result, g)] for g in range(WORLD)]
    assert [len(w) for w in per_rank] == [2, 2, 2, 2]
    assert per_rank[0] == per_rank[1] and per_rank[2] == per_rank[3]
    assert sorted(per_rank[0] + per_rank[2]) == [0, 1, 2, 3]
    for g, record in enumerate(records):
        for mode in hf_fsdp_worker.MODES:
            assert record[mode]["waves"] == per_rank[g]


@pytest.mark.parametrize("mode", hf_fsdp_worker.MODES)
def test_wrapped_step_gradients_equal_unpacked(step, mode):
    """Under FSDP2, HSDP and DDP: the per-wave losses summed over the two replicas are the step's
    unpacked loss, every parameter received a gradient (the wrapped modules' hooks fired: none of the
    sharded parameters is left without one) and every rank's full gradient equals the unpacked step
    gradient."""
    _, want_loss, want_grads, records = step
    replica_losses = [sum(records[g][mode]["losses"]) for g in (0, 2)]
    torch.testing.assert_close(sum(replica_losses), want_loss, rtol=1e-12, atol=0)
    for record in records:
        grads = record[mode]["grads"]
        assert grads.keys() == want_grads.keys()
        assert all(float(g.abs().max()) > 0 for g in grads.values())
        assert max_rel_grad_diff(grads, want_grads) <= GRADS
