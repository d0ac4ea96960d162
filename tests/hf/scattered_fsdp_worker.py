"""The worker of tests/hf/test_hf_fsdp_scattered.py: one gloo process per GPU of a ``dp x cp`` pool.

The test writes ``folder/job.pt`` (:func:`write_job`): the mesh shape, named plans of one step (each the
same waves under another chunk ownership) and the wrappers to run them under. Every rank builds the tiny
model from ``folder/model.pt`` for each (wrapper, plan) in turn, wraps it with FSDP2 (``fully_shard`` on
each decoder layer and the root over the flattened ``(dp, cp)`` mesh, gradients summed:
``set_gradient_divide_factor(1.0)``) or DDP over every rank (the loss scaled by the world size, so that
DDP's average is a sum), runs its pool rank's
waves (``cpplan.pool_waves``) with ``packed_logprobs(..., distributed=True, group=mesh["cp"])`` and
backpropagates GRPO's token-mean policy loss over the step's counted tokens; it saves its per-wave losses
and every parameter's full gradient (``full_tensor()``) as ``folder/rank{r}.pt``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

import cpplan
from tests.support.hf_spawn import init_gloo

TIMEOUT_S = 60


WRAPPERS = ("fsdp", "ddp")


def write_job(
    folder: Path, *, dp: int, cp: int, plans: dict[str, cpplan.Plan], wrappers: tuple[str, ...] = ("fsdp",)
) -> None:
    """The run every rank reads: the pool's mesh shape, the plans to run by name, and the wrappers
    (:data:`WRAPPERS`) to run each under."""
    assert set(wrappers) <= set(WRAPPERS), wrappers
    job = {"dp": dp, "cp": cp, "plans": plans, "wrappers": wrappers}
    torch.save(job, Path(folder) / "job.pt")


def step_denominator(workload: cpplan.Workload) -> int:
    """The step's counted tokens (every request's predicted positions): each wave's loss divides by it."""
    return sum(int(r.predicted().sum()) for _, _, r in workload.requests())


def run(rank: int, world: int, port: int, folder: str) -> None:
    """Entry point for ``torch.multiprocessing.start_processes``: every (wrapper, plan) of the job in
    turn, recorded under ``(wrapper, plan name)``."""
    from torch.distributed.device_mesh import init_device_mesh

    job = torch.load(Path(folder) / "job.pt", weights_only=False)
    init_gloo(rank, world, port, TIMEOUT_S)
    try:
        mesh = init_device_mesh("cpu", (job["dp"], job["cp"]), mesh_dim_names=("dp", "cp"))
        record = {
            (wrapper, name): _train_step(plan, wrapper, mesh, rank, Path(folder))
            for wrapper in job["wrappers"]
            for name, plan in job["plans"].items()
        }
        torch.save(record, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _train_step(plan: cpplan.Plan, wrapper: str, mesh, rank: int, folder: Path) -> dict:
    """This GPU's waves of ``plan`` under ``wrapper``: its per-wave losses and the full gradients."""
    from cpplan.hf import float64_internals, packed_logprobs
    from tests.support.hf_fsdp_worker import step_loss
    from tests.support.hf_models import mixed_workload, tiny_model

    model = tiny_model("qwen3_5_moe").train()
    model.load_state_dict(torch.load(folder / "model.pt"))
    wrapped = _shard(model, mesh) if wrapper == "fsdp" else _ddp(model)
    scale = dist.get_world_size() if wrapper == "ddp" else 1
    workload = mixed_workload(0)
    waves = cpplan.pool_waves(plan, rank)
    assert all(entry is not None and entry[1] == mesh["cp"].get_local_rank() for entry in waves), waves
    losses = []
    with float64_internals():
        for wave, _ in waves:
            logprobs = packed_logprobs(wrapped, plan, workload, wave=wave, distributed=True, group=mesh["cp"])
            loss = step_loss(logprobs, workload, step_denominator(workload))
            (scale * loss).backward()
            losses.append(loss.detach())
    return {"waves": [wave for wave, _ in waves], "losses": losses, "grads": _full_gradients(wrapped)}


def _shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """FSDP2 over every GPU of the pool (the ``dp x cp`` mesh flattened), gradients summed."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    pool = mesh["dp", "cp"]._flatten()
    for layer in model.model.layers:
        fully_shard(layer, mesh=pool)
    fully_shard(model, mesh=pool)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
    return model


def _ddp(model: torch.nn.Module) -> torch.nn.Module:
    """DDP over every GPU of the pool (it averages: the caller scales the loss by the world size)."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def _full_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's full gradient (FSDP2's DTensor shards gathered; zeros for none), named as in
    the bare model."""
    out = {}
    for name, p in model.named_parameters():
        grad = torch.zeros(p.shape, dtype=p.dtype) if p.grad is None else p.grad
        full = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        out[name.removeprefix("module.")] = full.detach().clone()
    return out
