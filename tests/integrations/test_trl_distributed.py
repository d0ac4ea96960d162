"""cpplan's GRPOTrainer under accelerate's FSDP2 and DDP on the CPU: two gloo processes whose batches
plan to different numbers of waves give the same GRPO steps as stock ``trl.GRPOTrainer`` run the same
way (under DDP the two processes' parameters stay equal: their gradients were reduced).

accelerate 1.15 takes its FSDP path only for GPU-like devices: ``AcceleratorState.__init__`` sets
``DistributedType.FSDP`` inside its branch for ``MULTI_GPU``, ``MULTI_NPU``, ``MULTI_XPU`` and the like,
so on the CPU (``MULTI_CPU``) the FSDP plugin is dropped and the model DDP-wrapped (``accelerate launch
--use_fsdp --fsdp_version 2`` and ``GRPOConfig(fsdp=True, fsdp_config={"version": 2})`` both). Each
process here therefore promotes the state to ``FSDP`` after accelerate built it (:func:`fsdp_on_cpu`);
from there on it is accelerate's own FSDP2 preparation (``fsdp2_prepare_model``: ``fully_shard`` on each
decoder layer, the embedding, the final norm with the LM head, and the root) and TRL's own training
loop, for both trainers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("trl", reason="the trl extra is not installed")
pytest.importorskip("datasets", reason="TRL's datasets dependency is not installed")

import cpplan
from cpplan.hf import float64_internals
from tests.integrations import trl_setup
from tests.support.hf_spawn import init_gloo, spawn_ranks

pytestmark = pytest.mark.slow
WORLD = 2
TIMEOUT_S = 60
"""The collective timeout in each process: a process left waiting in a collective fails after it."""
DEADLINE_S = 150
"""The spawner kills both processes after this, whatever they are doing."""
MEMORY_BYTES = int(5.6 * 2**30)
"""Per-wave budget for the 35B card: a few dozen tokens a wave, so each pass takes 2 to 4 waves and the
second policy pass takes 3 on process 0 and 2 on process 1 (its completions are shorter)."""
PARAMS = 1e-9
"""Largest allowed parameter difference from stock TRL (float64, float64 internals)."""


def fsdp_on_cpu() -> None:
    """Make accelerate keep its FSDP plugin on the CPU: whenever ``AcceleratorState.__init__`` leaves a
    multi-process CPU state as ``MULTI_CPU`` although it holds an FSDP plugin, set it to ``FSDP`` (what
    the same call does on GPUs). Every ``AcceleratorState()`` copies ``distributed_type`` back from the
    ``PartialState``, hence the check on every call."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    init = AcceleratorState.__init__

    def promoted(self, *args, fsdp_plugin=None, **kwargs):
        init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        plugin = fsdp_plugin or self.__dict__.get("fsdp_plugin")
        if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = plugin

    AcceleratorState.__init__ = promoted


def rollout(prompts: list, trainer) -> dict:
    """trl_setup's fixed completions; on process 1 cut to their first two tokens and ``<eos>``, so that the
    two processes' batches plan to different numbers of waves."""
    out = trl_setup.rollout(prompts, trainer)
    if trainer.accelerator.process_index == 1:
        out["completion_ids"] = [c[:2] + c[-1:] for c in out["completion_ids"]]
    return out


MODES = ("fsdp2", "ddp")
"""How accelerate wraps the model: FSDP2 (promoted on the CPU, :func:`fsdp_on_cpu`) or DDP (its CPU
default for several processes)."""


def run(rank: int, world: int, port: int, folder: str) -> None:
    """One process (entry point for ``torch.multiprocessing``): stock TRL, then cpplan's, each two SGD
    steps under the mode written in ``folder/mode``; saves ``rank{rank}.pt``."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    init_gloo(rank, world, port, TIMEOUT_S)
    try:
        mode = (Path(folder) / "mode").read_text()
        if mode == "fsdp2":
            fsdp_on_cpu()
        import trl

        from cpplan.integrations.trl import GRPOTrainer

        record = {
            name: _train(cls, Path(folder), name, mode)
            for name, cls in (("stock", trl.GRPOTrainer), ("cpplan", GRPOTrainer))
        }
        torch.save(record, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _train(cls, folder: Path, name: str, mode: str) -> dict:
    """Two SGD steps of ``cls`` under ``mode``; the losses, the full parameters, the wrapper and (cpplan)
    the number of real waves of every planned pass and how many waves were run for recomputation and
    rerun in backward."""
    import trl

    from cpplan.integrations import packed_step

    sharding = {"fsdp": True, "fsdp_config": {"version": 2}} if mode == "fsdp2" else {}
    args = trl_setup.config(
        folder / name, model_init_kwargs={"dtype": torch.float64}, optim="sgd", max_steps=2, **sharding
    )
    waves: list[int] = []
    recomputed = {"waves": 0, "reruns": 0}
    extra = {}
    isolated = packed_step.recomputed

    def counting(function, model):
        recomputed["waves"] += 1

        def counted():
            recomputed["reruns"] += torch.is_grad_enabled()
            return function()

        return isolated(counted, model)

    if cls is not trl.GRPOTrainer:
        packed_step.recomputed = counting
        planner = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes=MEMORY_BYTES, solver="deterministic")
        extra["planner"] = planner
    tr = cls(
        model=str(folder / "model"),
        reward_funcs=trl_setup.reward,
        args=args,
        train_dataset=trl_setup.dataset(8),
        processing_class=trl_setup.tokenizer(),
        rollout_func=rollout,
        **extra,
    )
    if cls is not trl.GRPOTrainer:  # the waves of every pass (a pass may reuse the pass before's plan)
        plan_of = tr._cpplan_plan

        def recording(workload, key):
            result = plan_of(workload, key)
            waves.append(result.plan.num_waves)
            return result

        tr._cpplan_plan = recording
    try:
        with float64_internals():
            tr.train()
    finally:
        packed_step.recomputed = isolated
    from torch.distributed.fsdp import FSDPModule

    def full(p: torch.Tensor) -> torch.Tensor:
        return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()

    params = {n: full(p) for n, p in tr.model.named_parameters()}
    losses = [log["loss"] for log in tr.state.log_history if "loss" in log]
    wrapper = "fsdp2" if isinstance(tr.model, FSDPModule) else type(tr.model_wrapped).__name__
    return {"losses": losses, "params": params, "waves": waves, "recomputed": recomputed, "wrapper": wrapper}


@pytest.fixture(scope="module", params=MODES)
def runs(request, tmp_path_factory):
    """Both processes' records under one mode, the mode, and the saved model's initial parameters."""
    folder = tmp_path_factory.mktemp(f"trl_{request.param}")
    (folder / "mode").write_text(request.param)
    path = trl_setup.saved_model("qwen3", folder / "model", torch.float64)
    records = spawn_ranks(
        run, WORLD, folder, preload=["tests.integrations.test_trl_distributed"], deadline_s=DEADLINE_S
    )
    return records, request.param, trl_setup.initial(path, torch.float64)


def test_processes_ran_wrapped_with_different_wave_counts(runs):
    """Both trainers ran on accelerate's preparation for the mode (the trained model is an
    ``FSDPModule``, or accelerate's model is a ``DistributedDataParallel``), and in at least one pass
    with gradients (the second step's policy pass) the two processes planned different numbers of real
    waves, so one of them ran a padding wave forward and backward."""
    records, mode, _ = runs
    wrapper = {"fsdp2": "fsdp2", "ddp": "DistributedDataParallel"}[mode]
    assert all(r[name]["wrapper"] == wrapper for r in records for name in ("stock", "cpplan"))
    waves = [r["cpplan"]["waves"] for r in records]
    assert len(waves[0]) == len(waves[1]) == 4  # old policy, reference, one policy pass per step
    assert waves[0][3] != waves[1][3] and max(waves[0][3], waves[1][3]) > 1


def test_policy_passes_recompute_every_wave(runs):
    """Under FSDP2 and DDP the cpplan trainer recomputes its waves in backward: in the two policy passes
    (the passes with gradients) each process ran as many waves for recomputation as the most either
    process planned (padding waves included, so both processes the same number: 2 + 3 here), and reran
    each of them exactly once in backward; stock TRL recomputed none."""
    records, _, _ = runs
    waves = [r["cpplan"]["waves"] for r in records]
    most = sum(max(w[p] for w in waves) for p in (2, 3) if max(w[p] for w in waves) > 1)
    for record in records:
        assert record["stock"]["recomputed"] == {"waves": 0, "reruns": 0}
        assert record["cpplan"]["recomputed"] == {"waves": most, "reruns": most}
    assert most == 5


def test_steps_equal_stock_trl(runs):
    """Two SGD steps (lr 1e-2, KL term: policy, old-policy and reference passes all packed) under FSDP2
    and under DDP over two gloo processes give stock TRL's losses and full (``full_tensor()``)
    parameters, run the same way: float64 with float64 internals, loss 1e-9 relative, parameters 1e-9
    (measured 1.4e-10, the floor of TRL's fused LM head, as single-process in
    tests/integrations/test_trl_grpo.py); training moved them by far more."""
    records, _, initial = runs
    for record in records:
        stock, ours = record["stock"], record["cpplan"]
        assert len(ours["losses"]) == 2
        assert ours["losses"] == pytest.approx(stock["losses"], rel=1e-9)
        worst = max(float((ours["params"][n] - p).abs().max()) for n, p in stock["params"].items())
        assert worst < PARAMS
        moved = max(float((ours["params"][n] - p).abs().max()) for n, p in initial.items())
        assert moved > 100 * PARAMS


def test_ddp_processes_end_with_equal_parameters(runs):
    """Under DDP the processes' batches differ (process 1's completions are cut), yet after two steps
    both hold the same parameters, for cpplan's trainer as for stock TRL: the gradients were reduced
    over the processes (an unwrapped forward would leave them local)."""
    records, mode, _ = runs
    if mode != "ddp":
        pytest.skip("FSDP2 shards the parameters: the full ones are gathered, equal by construction")
    for name in ("stock", "cpplan"):
        first, second = (r[name]["params"] for r in records)
        assert max(float((first[n] - second[n]).abs().max()) for n in first) < PARAMS
