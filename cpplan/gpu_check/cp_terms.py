"""The CP terms the cards take from published figures, measured where the hardware allows.

- ``ring_block``: attention forward + backward on one ring step's block, ``b`` queries against ``b`` keys
  (no mask: a block below the diagonal), for ``b`` from 512 to 16K tokens. The seconds per pair against
  the largest block's give the per-step kernel efficiency a ring of ``c`` ranks pays at ``T / c`` tokens
  per rank; the card prices CP at ``cp_compute_efficiency`` (its published ceiling) until this is known.
- ``all_to_all``: the all-to-all and the all-gather of the same bytes per rank over every CUDA device of
  the machine (NCCL, one process per device), as bus bandwidth (nccl-tests' definition: bytes per rank
  over the time, times ``(n - 1) / n``), against the card's ``all_to_all_bytes_per_s`` and
  ``interconnect_bytes_per_s``.

Each part needs CUDA (the all-to-all two devices or more); where it cannot run it is recorded as
``{"status": "skipped", "reason": ...}`` and the check goes on: a dry run on the CPU skips both."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cpplan.gpu_check.kernel_sweeps import timed

BLOCK_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
A2A_BYTES_PER_RANK = (2**24, 2**26, 2**28)
"""16 MiB, 64 MiB and 256 MiB per rank (head-parallel moves ~350 MB per rank and layer at 128K, CP8)."""


@dataclass(frozen=True, kw_only=True)
class BlockShape:
    """Heads of the ring-block sweep: ``heads`` query heads of ``head_dim`` (keys and values repeated to
    as many heads, as the fused kernels take them)."""

    heads: int
    head_dim: int


GPU_BLOCK = BlockShape(heads=16, head_dim=256)
"""Qwen3.6-35B-A3B's attention: 16 heads of 256."""


def skipped(reason: str) -> dict:
    """A part that did not run, and why."""
    return {"status": "skipped", "reason": reason}


def ring_block_sweep(
    shape: BlockShape,
    *,
    device: str,
    allowed: Callable[[float], bool],
    card_s_per_pair: float | None,
    card_cp_efficiency: float | None,
    blocks: tuple[int, ...] = BLOCK_TOKENS,
    reps: int = 3,
) -> dict:
    """Attention forward + backward on ``b x b`` blocks (bf16, CUDA) while ``allowed(estimate_s)``; each
    row's ``efficiency`` is its seconds per pair against the largest block's. Skipped off CUDA."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return skipped("needs a CUDA device (a dry run on the CPU prices CP at the card's published ceiling)")
    dev = torch.device(device)
    rows: list[dict] = []
    estimate = 0.0
    for block in blocks:
        if not allowed(estimate):
            break
        gen = torch.Generator(device="cpu").manual_seed(block)

        def rand(gen=gen, block=block):
            x = torch.randn(1, shape.heads, block, shape.head_dim, generator=gen)
            return x.to(device=dev, dtype=torch.bfloat16).requires_grad_()

        q, k, v = rand(), rand(), rand()

        def step(q=q, k=k, v=v) -> None:
            F.scaled_dot_product_attention(q, k, v).float().square().mean().backward()

        first, seconds = timed(step, dev, reps)
        estimate = 4 * 2 * seconds * (reps + 1)
        rows.append(
            {
                "block_tokens": block,
                "pairs": block * block,
                "first_s": first,
                "seconds": seconds,
                "reps": reps,
            }
        )
        del q, k, v
    if not rows:
        return skipped("the time limit left no room for the smallest block")
    best = rows[-1]["seconds"] / rows[-1]["pairs"]
    for row in rows:
        row["s_per_pair"] = row["seconds"] / row["pairs"]
        row["efficiency"] = best / row["s_per_pair"]
    torch.cuda.empty_cache()
    return {
        "status": "measured",
        "path": "scaled_dot_product_attention, no mask, bfloat16",
        "heads": shape.heads,
        "head_dim": shape.head_dim,
        "rows": rows,
        "card_s_per_pair": card_s_per_pair,
        "card_cp_efficiency": card_cp_efficiency,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collective_worker(rank: int, world: int, port: int, sizes: tuple[int, ...], reps: int, out: str) -> None:
    """One process per device: times all_to_all_single and all_gather_into_tensor of each size (bytes
    per rank); rank 0 writes ``size all_to_all_s all_gather_s`` lines to ``out``."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    dev = torch.device("cuda", rank)
    lines = []
    for size in sizes:
        # bf16 elements, a multiple of the world size (all_to_all_single splits them evenly)
        send = torch.ones(size // 2 // world * world, dtype=torch.bfloat16, device=dev)
        receive = torch.empty_like(send)
        gathered = torch.empty(world * send.numel(), dtype=torch.bfloat16, device=dev)
        seconds = []
        for op in (
            lambda send=send, receive=receive: dist.all_to_all_single(receive, send),
            lambda send=send, gathered=gathered: dist.all_gather_into_tensor(gathered, send),
        ):
            op()
            dist.barrier()
            _, s = timed(op, dev, reps)
            seconds.append(s)
        lines.append(f"{send.numel() * 2} {seconds[0]} {seconds[1]}")
    if rank == 0:
        with open(out, "w") as handle:
            handle.write("\n".join(lines))
    dist.destroy_process_group()


def all_to_all_measurement(
    *,
    device: str,
    card_all_to_all_bytes_per_s: float | None,
    card_all_gather_bytes_per_s: float | None,
    sizes: tuple[int, ...] = A2A_BYTES_PER_RANK,
    reps: int = 5,
) -> dict:
    """Bus bandwidth of NCCL's all-to-all and all-gather over every CUDA device here; skipped off CUDA or
    with fewer than two devices."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return skipped(
            "needs CUDA devices (a dry run on the CPU keeps the card's published all-to-all bandwidth)"
        )
    world = torch.cuda.device_count()
    if world < 2:
        return skipped(f"needs 2 or more CUDA devices in one node, found {world}")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "collectives.txt")
        mp.spawn(_collective_worker, args=(world, _free_port(), sizes, reps, out), nprocs=world, join=True)
        with open(out) as handle:
            measured = [line.split() for line in handle.read().splitlines()]
    share = (world - 1) / world
    rows = [
        {
            "bytes_per_rank": int(size),
            "all_to_all_s": float(a2a),
            "all_gather_s": float(gather),
            "all_to_all_bus_bytes_per_s": int(size) * share / float(a2a),
            "all_gather_bus_bytes_per_s": int(size) * world * share / float(gather),
        }
        for size, a2a, gather in measured
    ]
    largest = rows[-1]
    return {
        "status": "measured",
        "num_devices": world,
        "rows": rows,
        "all_to_all_over_all_gather": largest["all_to_all_bus_bytes_per_s"]
        / largest["all_gather_bus_bytes_per_s"],
        "card_all_to_all_bytes_per_s": card_all_to_all_bytes_per_s,
        "card_all_gather_bytes_per_s": card_all_gather_bytes_per_s,
    }


__all__ = [
    "A2A_BYTES_PER_RANK",
    "BLOCK_TOKENS",
    "GPU_BLOCK",
    "BlockShape",
    "all_to_all_measurement",
    "ring_block_sweep",
    "skipped",
]
