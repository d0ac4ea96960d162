"""step_logprobs recomputing its waves under FSDP2 on two gloo processes whose steps plan to different
numbers of waves (three on process 0; one on process 1, which then runs two padding waves).

The model is sharded as accelerate's FSDP2 preparation leaves it: ``fully_shard`` on each decoder layer,
the embedding, the final norm with the LM head (``reshard_after_forward=False``) and the root. Each wave
recomputed in isolation (:func:`cpplan.integrations.packed_step.recomputed`) keeps the two processes'
collectives in step and gives the gradients of the run without recomputation; the whole-wave
``torch.utils.checkpoint(..., use_reentrant=False)`` step_logprobs used before does not finish.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.support.hf_spawn import init_gloo, spawn_ranks

pytestmark = pytest.mark.slow
WORLD = 2
MEMORY_BYTES = "6GiB"
"""For the 35B card: process 0's 18 rows plan to three waves, process 1's first six rows to one."""
GRADS = 1e-12
"""Largest gradient difference from the run without recomputation, relative to each parameter's largest
entry (float64, float64 internals: the recomputation repeats the same float64 operations)."""
PRELOAD = ["tests.integrations.test_packed_step_fsdp2", "tests.integrations.test_packed_step"]


def run(rank: int, world: int, port: int, folder: str) -> None:
    """One process (entry point for ``torch.multiprocessing``): for each mode of ``config.json`` a fresh
    sharded model, the step's log-probs, a backward; saves ``rank{rank}.pt``."""
    config = json.loads((Path(folder) / "config.json").read_text())
    init_gloo(rank, world, port, config["timeout_s"])
    try:
        record = {mode: _step(rank, mode) for mode in config["modes"]}
        torch.save(record, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _sharded_model() -> torch.nn.Module:
    """The tiny Qwen3 (float64, two layers) sharded as accelerate's ``fsdp2_prepare_model`` does."""
    from torch.distributed.fsdp import fully_shard

    from tests.support.hf_models import tiny_model

    model = tiny_model("qwen3", layers=2).train()
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model.model.embed_tokens)
    fully_shard([model.model.norm, model.lm_head], reshard_after_forward=False)
    fully_shard(model)
    return model


def _step(rank: int, mode: str) -> dict:
    """``mode``: ``"plain"`` (no recomputation), ``"isolated"`` (step_logprobs' recomputation) or
    ``"whole_wave"`` (each wave under non-reentrant checkpointing). The real and agreed wave counts, the
    embedding's calls in forward and in backward, and the full gradients."""
    from torch.utils.checkpoint import checkpoint

    import cpplan
    from cpplan.hf import float64_internals
    from cpplan.integrations import packed_step
    from cpplan.integrations.rollout_items import grouped_workload
    from tests.integrations.test_packed_step import rows

    model = _sharded_model()
    mine = rows(rank) if rank == 0 else rows(rank)[:6]
    workload, _ = grouped_workload(mine)
    result = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes=MEMORY_BYTES, solver="deterministic").plan(
        workload
    )
    agreed = packed_step.agreed_num_waves(result.plan.num_waves)
    calls = []
    model.model.embed_tokens.register_forward_hook(lambda *_: calls.append(1))
    isolated = packed_step.recomputed
    if mode == "whole_wave":
        packed_step.recomputed = lambda function, _model: checkpoint(function, use_reentrant=False)
    try:
        with float64_internals():
            logprobs, _ = packed_step.step_logprobs(
                model, result, workload, num_waves=agreed, kernels="torch", recompute_waves=mode != "plain"
            )
            forward = len(calls)
            sum((k + 1) * lp.sum() for k, (_, lp) in enumerate(sorted(logprobs.items()))).backward()
    finally:
        packed_step.recomputed = isolated
    grads = {name: p.grad.full_tensor().detach().clone() for name, p in model.named_parameters()}
    return {
        "waves": result.plan.num_waves,
        "agreed": agreed,
        "forward": forward,
        "backward": len(calls) - forward,
        "grads": grads,
    }


def _spawn(folder: Path, modes: tuple[str, ...], timeout_s: int, deadline_s: float) -> list[dict]:
    (folder / "config.json").write_text(json.dumps({"modes": list(modes), "timeout_s": timeout_s}))
    return spawn_ranks(run, WORLD, folder, preload=PRELOAD, deadline_s=deadline_s)


def test_isolated_recompute_under_fsdp2_gives_the_gradients_without_it(tmp_path):
    """Process 0 plans three waves, process 1 one (so it pads with two): with recomputation every one of
    the three waves on each process (padding waves too) runs its forward once in forward and once more in
    backward, both processes finish, and every full gradient equals the one without recomputation (1e-12
    of each parameter's largest entry), which runs no forward in backward."""
    records = _spawn(tmp_path, ("plain", "isolated"), timeout_s=30, deadline_s=120)
    assert [r["isolated"]["waves"] for r in records] == [3, 1]
    for record in records:
        plain, isolated = record["plain"], record["isolated"]
        assert plain["agreed"] == isolated["agreed"] == 3
        assert isolated["forward"] == isolated["backward"] == 3
        assert plain["forward"] == 3 and plain["backward"] == 0
        for name, want in plain["grads"].items():
            assert float(want.abs().max()) > 0
            diff = float((isolated["grads"][name] - want).abs().max())
            assert diff <= GRADS * float(want.abs().max()), name


def test_whole_wave_checkpoint_under_fsdp2_does_not_finish(tmp_path):
    """The same step with each wave under ``torch.utils.checkpoint(..., use_reentrant=False)`` (what
    step_logprobs did before): the padded process's backward reaches the LM head's FSDP2 pre-backward
    hook (an unshard and a prefetch all-gather) before any recomputation, the other process starts with
    its first wave's recomputation (the embedding's all-gather), so the all-gathers mismatch: a process
    fails in gloo or hangs until the collective timeout, and the spawner's deadline kills the rest."""
    with pytest.raises((TimeoutError, mp.ProcessRaisedException, mp.ProcessExitedException)):
        _spawn(tmp_path, ("whole_wave",), timeout_s=15, deadline_s=60)
