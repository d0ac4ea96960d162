"""Start gloo ranks for the cpplan.hf multi-process tests: one process per rank, forked from a fork
server that imported transformers and cpplan.hf once, bounded in time."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.multiprocessing as mp

DEADLINE_S = 240
PRELOAD = [
    "tests.support.hf_gloo_worker",
    "tests.support.hf_models",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
]


def init_gloo(rank: int, world: int, port: int, timeout_s: float) -> None:
    """This process as gloo rank ``rank`` of ``world`` over 127.0.0.1:``port``, one intra-op thread; a
    collective left waiting fails after ``timeout_s``."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(
    run: Callable, world: int, folder: Path, *, preload: list[str] = (), deadline_s: float = DEADLINE_S
) -> list[dict]:
    """Run ``run(rank, world, port, folder)`` in ``world`` processes, wait at most ``deadline_s`` (then
    kill them), and return every rank's record ``folder/rank{r}.pt``."""
    mp.set_forkserver_preload([*PRELOAD, *preload])
    context = mp.start_processes(
        run, args=(world, free_port(), str(folder)), nprocs=world, join=False, start_method="forkserver"
    )
    deadline = time.monotonic() + deadline_s
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gloo ranks did not finish within {deadline_s} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [torch.load(Path(folder) / f"rank{r}.pt") for r in range(world)]
