"""The worker of tests/hf/test_hf_fsdp.py: one process per GPU of a dp=2 x cp=2 pool over gloo.

Every rank builds the same tiny model (from a saved state dict), wraps it as a trainer would (FSDP2
``fully_shard`` on each decoder layer and the root over the flattened 4-rank mesh, HSDP over the 2-D
``(dp, cp)`` mesh, or DDP), plans the same step with the deterministic profile and runs *its pool rank's
waves* (``cpplan.pool_waves``) with ``packed_logprobs(..., distributed=True, group=mesh["cp"])``. Each
wave backpropagates GRPO's token-mean policy loss over the step's counted tokens (all-reduced over DP);
the wrapper reduces the gradients as a sum over all four ranks; the full gradients are saved. A padding
wave (a ``None`` entry of an equal-waves plan's list) runs ``cpplan.hf.padding_wave`` and backpropagates
its zero loss. ``folder/config.json`` (optional, :func:`write_config`) names the budget, the modes, the
collective timeout and whether to skip the padding waves (what a trainer unaware of them would do).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

import cpplan
from tests.support.hf_spawn import init_gloo

TIMEOUT_S = 90
DP, CP = 2, 2
STEP_MEMORY_BYTES = int(5.8 * 2**30)
"""A budget under which the step takes four waves, two per DP replica (equal counts: FSDP needs every
rank to run the same number of forwards)."""
UNEQUAL_MEMORY_BYTES = int(5.7 * 2**30)
"""A budget under which the step takes five waves, three on replica 0 and two on replica 1: equal waves
(the default) pads replica 1's GPUs with one empty wave each."""
MODES = ("fsdp", "hsdp", "ddp")


def step_plan(
    workload: cpplan.Workload, memory_bytes: int = STEP_MEMORY_BYTES, equal_waves: bool | None = None
) -> cpplan.PlanResult:
    """The step's deterministic plan for Qwen3.6-35B-A3B on a dp=2 x cp=2 pool."""
    from tests.support.hf_models import CARD

    return cpplan.plan(
        workload,
        topology=cpplan.Topology(cp=CP, dp=DP, equal_waves=equal_waves),
        model=cpplan.load_model(CARD),
        memory_bytes=memory_bytes,
        solver=cpplan.load_solver("deterministic"),
    )


def write_config(
    folder: Path,
    *,
    memory_bytes: int = STEP_MEMORY_BYTES,
    modes: tuple[str, ...] = MODES,
    timeout_s: int = TIMEOUT_S,
    skip_padding: bool = False,
) -> None:
    """The run's settings for every rank: the step's budget, the wrappers to run in turn, the collective
    timeout, and whether the ranks skip their padding waves."""
    config = {"memory_bytes": memory_bytes, "modes": list(modes), "timeout_s": timeout_s}
    (Path(folder) / "config.json").write_text(json.dumps({**config, "skip_padding": skip_padding}))


def _config(folder: Path) -> dict:
    path = folder / "config.json"
    given = json.loads(path.read_text()) if path.exists() else {}
    defaults = {"memory_bytes": STEP_MEMORY_BYTES, "modes": list(MODES), "timeout_s": TIMEOUT_S}
    return {**defaults, "skip_padding": False, **given}


def advantages(workload: cpplan.Workload) -> dict:
    """A distinct sequence-level advantage per request."""
    keys = [(item.id, k) for item in workload.items for k in range(len(item.requests))]
    return {key: 0.75 - 0.2 * j for j, key in enumerate(keys)}


def step_loss(logprobs: dict, workload: cpplan.Workload, denominator: float | None) -> torch.Tensor:
    """GRPO's surrogate: per-request advantages, token mean under the workload's loss masks."""
    from cpplan.hf import policy_loss

    return policy_loss(logprobs, advantages(workload), workload=workload, denominator=denominator)


def run(rank: int, world: int, port: int, folder: str) -> None:
    """Entry point for ``torch.multiprocessing.start_processes``: every mode in turn."""
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    config = _config(Path(folder))
    init_gloo(rank, world, port, config["timeout_s"])
    try:
        mesh = init_device_mesh("cpu", (DP, CP), mesh_dim_names=("dp", "cp"))
        record = {mode: _train_step(mode, mesh, rank, Path(folder), config) for mode in config["modes"]}
        torch.save(record, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _train_step(mode: str, mesh, rank: int, folder: Path, config: dict) -> dict:
    from cpplan.hf import float64_internals, packed_logprobs, padding_wave
    from tests.support.hf_models import mixed_workload, tiny_model

    model = tiny_model("qwen3_5_moe").train()
    model.load_state_dict(torch.load(folder / "model.pt"))
    wrapped = _wrap(model, mode, mesh)
    workload = mixed_workload(0)
    result = step_plan(workload, config["memory_bytes"])
    waves = cpplan.pool_waves(result, rank)
    if config["skip_padding"]:
        waves = [entry for entry in waves if entry is not None]
    assert all(e is None or e[1] == mesh["cp"].get_local_rank() for e in waves), waves
    # DDP averages over its 4 ranks: scaling the loss by 4 makes the reduction a sum.
    scale = dist.get_world_size() if mode == "ddp" else 1
    losses = []
    with float64_internals():
        denominator = _step_denominator(result, workload, waves, mesh["dp"].get_group())
        for entry in waves:
            if entry is None:
                loss = padding_wave(wrapped)
            else:
                logprobs = packed_logprobs(
                    wrapped, result, workload, wave=entry[0], distributed=True, group=mesh["cp"]
                )
                loss = step_loss(logprobs, workload, denominator)
            (scale * loss).backward()
            losses.append(loss.detach())
    listed = [None if e is None else e[0] for e in waves]
    return {"waves": listed, "losses": losses, "grads": _full_gradients(wrapped)}


def _wrap(model: torch.nn.Module, mode: str, mesh) -> torch.nn.Module:
    """The model as the trainer wraps it: FSDP2 over all ranks, HSDP over (dp, cp), or DDP."""
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import FSDPModule, fully_shard

    shard_mesh = mesh["dp", "cp"]._flatten() if mode == "fsdp" else mesh
    for layer in model.model.layers:
        fully_shard(layer, mesh=shard_mesh)
    fully_shard(model, mesh=shard_mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
    return model


def _step_denominator(result, workload, waves, dp_group) -> float:
    """The step's counted tokens: those of this replica's waves, all-reduced (sum) over DP."""
    counted = 0
    for wave, wave_rank in (e for e in waves if e is not None):
        keys = cpplan.materialize(result, workload, wave=wave, rank=wave_rank).requests
        requests = (workload.items[workload.index_of[i]].requests[k] for i, k in keys)
        counted += sum(int(r.predicted().sum()) for r in requests)
    total = torch.tensor(counted, dtype=torch.int64)
    dist.all_reduce(total, group=dp_group)
    return float(total)


def _full_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's full gradient (DTensor gradients gathered), named as in the bare model."""
    out = {}
    for name, p in model.named_parameters():
        grad = torch.zeros(p.shape, dtype=p.dtype) if p.grad is None else p.grad
        full = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        out[name.removeprefix("module.")] = full.detach().clone()
    return out
