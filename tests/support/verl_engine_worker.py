"""The worker of tests/integrations/test_verl_engine_dp.py: one verl DP rank of two over gloo.

Each rank builds verl's stock ``FSDPEngineWithLMHead`` and cpplan's engine from the same saved tiny
Qwen3 (FSDP2 over both ranks, float64, patched for the CPU as in tests/support/verl_cpu.py) and runs one
training pass of each on its own batch: rank 0 has 3 prompts, rank 1 has 2, so under the test's budget
cpplan plans 3 waves on rank 0 and 2 on rank 1, and rank 1 runs one padding wave. Each rank saves both
engines' summed losses, micro-batch counts, full gradients and the cpplan plan's wave count. With
``folder/no_padding`` present the engine's wave agreement is switched off (what an engine unaware of
FSDP2's lock step would do), which must not finish.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

TIMEOUT_S = 60


def run(rank: int, world: int, port: int, folder: str) -> None:
    """One rank: both engines' training pass on this rank's batch, saved to ``folder/rank{rank}.pt``."""
    import cpplan
    import cpplan.hf
    from tests.support import verl_cpu
    from tests.support.hf_spawn import init_gloo

    init_gloo(rank, world, port, TIMEOUT_S)
    with verl_cpu.cpu_verl():
        from verl.workers.engine import FSDPEngineWithLMHead

        from cpplan.integrations.verl import CpplanFSDPEngine, engine

        if (Path(folder) / "no_padding").exists():
            engine.agreed_num_waves = lambda count, **_: count
        path = str(Path(folder) / "model")
        planner = cpplan.Planner(
            model="qwen3.6-35b-a3b", memory_bytes=verl_cpu.MEMORY_3_WAVES, solver="deterministic"
        )
        record = {}
        for name, engine_class, extra in (
            ("stock", FSDPEngineWithLMHead, {}),
            ("cpplan", CpplanFSDPEngine, {"planner": planner}),
        ):
            built = verl_cpu.engine(engine_class, path, **extra)
            data = batch(rank)
            loss_fn = verl_cpu.ppo_loss(20)
            with cpplan.hf.float64_internals(), built.train_mode():
                built.optimizer_zero_grad()
                out = built.forward_backward_batch(data, loss_fn)
                grads = {n: p.grad.full_tensor().clone() for n, p in built.module.named_parameters()}
            record[name] = {"loss": sum(out["loss"]), "micro_batches": len(out["loss"]), "grads": grads}
            if name == "cpplan":
                record["planned_waves"] = built.cpplan_result.plan.num_waves
                record["ran_micro_batches"] = built.cpplan_micro_batches
        torch.save(record, Path(folder) / f"rank{rank}.pt")
    dist.destroy_process_group()


def batch(rank: int):
    """Rank 0: 3 prompts x 4 responses; rank 1: 2 prompts x 4 (another seed); one global batch of 20
    samples whose token-mean loss both engines normalise over the two ranks."""
    from tests.support import verl_cpu

    return verl_cpu.ppo_batch(seed=rank, num_prompts=3 - rank, global_batch_size=20)


__all__ = ["TIMEOUT_S", "batch", "run"]
