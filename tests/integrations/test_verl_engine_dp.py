"""cpplan's verl engine on two gloo DP ranks under FSDP2 against verl's stock engine: ranks that plan
different numbers of waves run the same number of micro-batches (the short one pads), and the step's
loss and gradients equal the stock engine's (worker: tests/support/verl_engine_worker.py)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl", reason="the verl extra is not installed")
pytest.importorskip("tensordict", reason="the verl extra is not installed")

from tests.support import verl_cpu, verl_engine_worker
from tests.support.hf_spawn import spawn_ranks

TOL = 1e-9
PRELOAD = ["tests.support.verl_engine_worker", "tests.support.verl_cpu", "verl.workers.engine"]


@pytest.mark.slow
def test_two_dp_ranks_equal_the_stock_engine(tmp_path):
    """Rank 0 plans 3 waves, rank 1 plans 2: both run 3 micro-batches (rank 1 one padding wave); each
    rank's summed loss equals the stock engine's on that rank (1e-9 relative) and the full gradients,
    identical on both ranks, equal the stock engine's (1e-9 relative per parameter)."""
    verl_cpu.saved_model("qwen3", tmp_path / "model")
    records = spawn_ranks(verl_engine_worker.run, 2, tmp_path, preload=PRELOAD)
    assert [r["planned_waves"] for r in records] == [3, 2]
    for record in records:
        stock, ours = record["stock"], record["cpplan"]
        assert ours["micro_batches"] == record["planned_waves"] and record["ran_micro_batches"] == 3
        assert abs(stock["loss"] - ours["loss"]) <= TOL * abs(stock["loss"])
        for name, grad in stock["grads"].items():
            scale = grad.abs().max().clamp(min=1e-300)
            assert float((grad - ours["grads"][name]).abs().max() / scale) <= TOL, name
    for name, grad in records[0]["cpplan"]["grads"].items():
        assert torch.equal(grad, records[1]["cpplan"]["grads"][name]), name


@pytest.mark.slow
def test_without_the_agreement_the_ranks_hang(tmp_path):
    """With the engine's wave-count agreement removed (each rank runs only its own plan's waves) the
    ranks' FSDP2 collectives go out of step: the run does not finish (a gloo timeout, or, when the rank
    with fewer waves leaves first, the other's collective finding its peer gone)."""
    verl_cpu.saved_model("qwen3", tmp_path / "model")
    (tmp_path / "no_padding").touch()
    with pytest.raises(Exception, match=r"Timed out waiting|did not finish within|Connection closed by peer"):
        spawn_ranks(
            verl_engine_worker.run,
            2,
            tmp_path,
            preload=PRELOAD,
            deadline_s=verl_engine_worker.TIMEOUT_S + 60,
        )
