"""Equal waves inside FSDP2 and DDP: four gloo processes as a dp=2 x cp=2 pool run a step whose real waves
per replica are unequal (three and two, at 5.7 GiB). Under equal waves (the default) every rank runs its
padded ``pool_waves`` list, ``cpplan.hf.padding_wave`` for each ``None``: no rank hangs, and the gradients
equal the unpacked single-process step's (float64 internals: within 1e-8 of each parameter's largest
entry, as in tests/hf/test_hf_fsdp.py; measured ~3e-12). Without the padding waves the same step does not
finish."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

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
MEMORY_BYTES = hf_fsdp_worker.UNEQUAL_MEMORY_BYTES
MODES = hf_fsdp_worker.MODES
GRADS = 1e-8
PRELOAD = ["tests.support.hf_fsdp_worker"]


def _saved_model(folder):
    model = tiny_model("qwen3_5_moe").train()
    torch.save(model.state_dict(), folder / "model.pt")
    return model


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """The step's unpacked loss and gradients, and every rank's record of the padded step."""
    folder = tmp_path_factory.mktemp("fsdp_padding")
    model = _saved_model(folder)
    workload = mixed_workload(0)
    with float64_internals():
        loss = hf_fsdp_worker.step_loss(unpacked_logprobs(model, workload), workload, None)
        grads = gradients(model, loss)
    hf_fsdp_worker.write_config(folder, memory_bytes=MEMORY_BYTES, modes=MODES)
    records = spawn_ranks(hf_fsdp_worker.run, WORLD, folder, preload=PRELOAD)
    return workload, loss.detach(), grads, records


def test_unequal_real_waves_are_padded_and_every_rank_ran_its_padded_list(step):
    """At 5.7 GiB replica 0 runs three real waves and replica 1 two (the unequal plan, equal waves off,
    has exactly these lists); under equal waves replica 1's GPUs each end with one padding wave, so every
    list has three entries, and every rank ran exactly its padded list (the padding wave included) in
    every mode."""
    workload, _, _, records = step
    unequal = hf_fsdp_worker.step_plan(workload, MEMORY_BYTES, equal_waves=False)
    result = hf_fsdp_worker.step_plan(workload, MEMORY_BYTES)
    padded = [cpplan.pool_waves(result, g) for g in range(WORLD)]
    real = [[e for e in entries if e is not None] for entries in padded]
    assert real == [cpplan.pool_waves(unequal, g) for g in range(WORLD)]
    assert [len(r) for r in real] == [3, 3, 2, 2]
    assert [len(p) for p in padded] == [3, 3, 3, 3]
    assert padded[2][-1] is None and padded[3][-1] is None
    assert result.plan.schedule.padding == (0, 0, 1, 1)
    for g, record in enumerate(records):
        for mode in MODES:
            assert record[mode]["waves"] == [None if e is None else e[0] for e in padded[g]]


@pytest.mark.parametrize("mode", MODES)
def test_padded_step_gradients_equal_unpacked(step, mode):
    """Under FSDP2 (all four ranks), HSDP and DDP: the padding waves' losses are zero, the per-wave losses
    summed over the two replicas are the step's unpacked loss, every parameter received a gradient and
    every rank's full gradient equals the unpacked step gradient."""
    _, want_loss, want_grads, records = step
    assert [float(loss) for loss in records[2][mode]["losses"]][-1] == 0.0
    replica_losses = [sum(records[g][mode]["losses"]) for g in (0, 2)]
    torch.testing.assert_close(sum(replica_losses), want_loss, rtol=1e-12, atol=0)
    for record in records:
        grads = record[mode]["grads"]
        assert grads.keys() == want_grads.keys()
        assert all(float(g.abs().max()) > 0 for g in grads.values())
        assert max_rel_grad_diff(grads, want_grads) <= GRADS


def test_skipping_the_padding_waves_does_not_finish(tmp_path):
    """The same FSDP2 step with every rank skipping its padding waves (what a trainer unaware of them
    does: replica 1 runs two forwards, replica 0 three) does not finish: a rank fails in a mismatched
    collective or hangs until the short collective timeout, and the spawner's deadline kills the rest."""
    _saved_model(tmp_path)
    hf_fsdp_worker.write_config(
        tmp_path, memory_bytes=MEMORY_BYTES, modes=("fsdp",), timeout_s=15, skip_padding=True
    )
    with pytest.raises((TimeoutError, mp.ProcessRaisedException, mp.ProcessExitedException)):
        spawn_ranks(hf_fsdp_worker.run, WORLD, tmp_path, preload=PRELOAD, deadline_s=90)
