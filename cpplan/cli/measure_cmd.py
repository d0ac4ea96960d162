"""``cpplan measure``: run a plan's waves on a random-weight model on CUDA and write the observed peaks
and seconds as logs ``cpplan calibrate`` (and ``Planner.load``) read."""

from __future__ import annotations

import os
from pathlib import Path

import click

from cpplan.calibration.measure import (
    CudaMemory,
    build_model,
    clear_gradients,
    hf_run_wave,
    measure_plan,
    write_logs,
)
from cpplan.cli import COMMANDS, cli
from cpplan.errors import InputError
from cpplan.plans.plan_reader import read_plan_file
from cpplan.spec.workload import Workload


@cli.command("measure", short_help=COMMANDS["measure"][1])
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(path_type=Path))
@click.argument("workload", type=click.Path(path_type=Path))
@click.option(
    "--hf-config",
    "hf_config",
    required=True,
    type=click.Path(path_type=Path),
    metavar="CONFIG",
    help="A transformers config.json (or its folder): the model is built from it with random weights.",
)
@click.option(
    "--output",
    "-o",
    "output",
    required=True,
    metavar="PREFIX",
    help="Write PREFIX.cold.jsonl and PREFIX.warm.jsonl.",
)
@click.option("--waves", "waves", default=None, metavar="0,1,...", help="Waves to measure (default: all).")
@click.option(
    "--repeats", "repeats", type=int, default=2, show_default=True, help="Runs per wave (1st cold)."
)
@click.option("--dtype", "dtype", default="bfloat16", show_default=True, help="Model dtype.")
@click.option("--lora-rank", "lora_rank", type=int, default=16, show_default=True, help="0: no LoRA.")
@click.option("--kernels", "kernels", default="auto", show_default=True, help="cpplan.hf kernels.")
def measure_command(
    plan_file: Path,
    workload: Path,
    hf_config: Path,
    output: str,
    waves: str | None,
    repeats: int,
    dtype: str,
    lora_rank: int,
    kernels: str,
) -> int:
    """Run PLAN.json's waves of WORKLOAD through the model of --hf-config (cpplan.hf, truncated to the
    plan's layers) on CUDA and record, per CP rank and phase, torch.cuda.max_memory_allocated above the
    pre-wave baseline and the wave's seconds. CP1 plans run in one process; for CP > 1 launch one process
    per CP rank: torchrun --nproc-per-node CP -m cpplan.cli.measure_cmd PLAN.json WORKLOAD ..."""
    import torch

    if not torch.cuda.is_available():
        raise InputError("needs a CUDA device (torch.cuda.is_available() is False)", field="device")
    plan = read_plan_file(plan_file)
    cp = int(plan.get("topology", {}).get("cp", 1))
    rank, group = _process_group(cp)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    model = build_model(
        hf_config, num_layers=int(plan["layers"]), dtype=dtype, device=str(device), lora_rank=lora_rank
    )
    run = hf_run_wave(
        model, plan, Workload.from_jsonl(workload), distributed=cp > 1, group=group, kernels=kernels
    )
    chosen = None if waves is None else _wave_list(waves)
    measured = measure_plan(
        run,
        plan,
        memory=CudaMemory(device),
        rank=rank,
        waves=chosen,
        repeats=repeats,
        clear=clear_gradients(model),
    )
    measured = _gather(measured, cp)
    if rank == 0:
        for path in write_logs(measured, plan, output):
            click.echo(f"wrote {path}")
        for m in measured:
            click.echo(
                f"wave {m.wave} rank {m.rank} {m.phase}: {m.peak_bytes / 1e9:.3f} GB above "
                f"{m.baseline_bytes / 1e9:.3f} GB, {m.seconds:.3f} s"
            )
    return 0


def _wave_list(text: str) -> list[int]:
    try:
        return [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise InputError(f"must be comma-separated wave numbers, got {text!r}", field="waves") from None


def _process_group(cp: int):
    """This process's CP rank and group: rank 0 alone for CP1, else the torchrun world (which must be
    the plan's CP size)."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", 1))
    if cp == 1 and world == 1:
        return 0, None
    if world != cp:
        raise InputError(
            f"the plan has cp={cp}: run one process per CP rank (torchrun --nproc-per-node {cp}), "
            f"not {world}",
            field="topology.cp",
        )
    dist.init_process_group("nccl")
    return dist.get_rank(), dist.group.WORLD


def _gather(measured: list, cp: int) -> list:
    """Every rank's measurements on every rank (rank order), for rank 0 to write."""
    if cp == 1:
        return measured
    import torch.distributed as dist

    gathered: list = [None] * cp
    dist.all_gather_object(gathered, measured)
    return sorted((m for part in gathered for m in part), key=lambda m: (m.run, m.rank))


if __name__ == "__main__":  # torchrun -m cpplan.cli.measure_cmd ...
    import sys

    from cpplan.cli import main

    sys.exit(main(["measure", *sys.argv[1:]]))
