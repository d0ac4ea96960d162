"""Real torch.distributed runs (gloo, 2 and 4 processes on localhost): plan agreement across DP ranks
and CP execution with a key/value all-gather, compared with the unsharded wave.

Each world size starts its processes once (this file, run as a script, is the worker); every worker
writes what it saw to a JSON file and the tests check those records. The processes act as both the
data-parallel group (agreement) and the CP group (execution).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

import cpplan
from cpplan import Item, Request, Topology, Workload
from cpplan.pricing.wave import price_wave
from cpplan.runtime.distributed import plan_digest

pytestmark = pytest.mark.slow  # gloo worker processes

TIMEOUT_S = 240
VOCAB = 16
PLAN_ARGS = {"model": "qwen3-8b", "memory_bytes": 80 * 2**30, "solver": "deterministic"}


def grpo_workload(extra_tokens: int = 0) -> Workload:
    """Two prompts sharing a system prompt, three completions each (about 800 packed tokens)."""
    rng = np.random.default_rng(0)
    system = rng.integers(0, VOCAB, 60).tolist()
    items = []
    for p in range(2):
        prompt = rng.integers(0, VOCAB, 150).tolist()
        requests = [
            Request(tokens=system + prompt + rng.integers(0, VOCAB, int(rng.integers(50, 100))).tolist())
            for _ in range(3)
        ]
        items.append(Item(id=f"p{p}", requests=tuple(requests)))
    if extra_tokens:
        last = items[-1].requests[-1]
        grown = Request(tokens=np.append(last.tokens, rng.integers(0, VOCAB, extra_tokens)))
        items[-1] = Item(id=items[-1].id, requests=(*items[-1].requests[:-1], grown))
    return Workload(items=tuple(items))


def _worker(rank: int, world: int, port: int, out: Path) -> None:
    import torch
    import torch.distributed as dist

    from cpplan.runtime.distributed import PlanMismatchError, agree_on_plan

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=TIMEOUT_S // 2),
    )
    record: dict = {"rank": rank}
    try:
        workload = grpo_workload()
        result = cpplan.plan(workload, topology=Topology(cp=world), **PLAN_ARGS)
        record["digest"] = agree_on_plan(result, workload=workload)
        record["strategy"] = result.strategy
        # A rank that plans a different workload (one completion 40 tokens longer) must be named.
        odd = rank == world // 2
        mine = grpo_workload(extra_tokens=40 if odd else 0)
        try:
            agree_on_plan(cpplan.plan(mine, topology=Topology(cp=world), **PLAN_ARGS), workload=mine)
            record["mismatch"] = None
        except PlanMismatchError as exc:
            record["mismatch"] = {"ranks": list(exc.ranks), "message": str(exc)}

        # The planner's contiguous ranges, then chunks dealt round-robin (non-contiguous ownership).
        wave = result.plan.waves[0]
        dealt = np.arange(wave.owner.size) % world
        round_robin = price_wave(result.problem, wave.items, wave.layout, wave.layout_name, dealt)
        record["cp"] = {
            "planned": _cp_run(result.plan, workload, rank),
            "round_robin": _cp_run(cpplan.Plan(strategy="test", waves=(round_robin,)), workload, rank),
        }
    finally:
        dist.destroy_process_group()
        out.write_text(json.dumps(record))


def _cp_run(plan, workload: Workload, rank: int) -> dict:
    """This rank's share of wave 0 with keys and values all-gathered, against the unsharded wave."""
    import torch
    import torch.distributed as dist

    from cpplan.runtime.attention_mask import TreeMask
    from cpplan.runtime.distributed import kv_all_gather
    from cpplan.runtime.materialize import materialize_wave
    from cpplan.runtime.reference_model import ReferenceConfig, ReferenceLM, batch_loss, run_wave

    batch = cpplan.materialize(plan, workload, wave=0, rank=rank)
    torch.manual_seed(0)
    model = ReferenceLM(
        ReferenceConfig(vocab_size=VOCAB, hidden=16, num_heads=2, num_layers=2, ffn=32)
    ).double()
    mask = TreeMask.for_batch(batch).dense()
    logits = model(batch.input_ids, batch.position_ids, mask, kv_all_gather(batch))
    loss = batch_loss(logits, batch)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(grads)
    total = loss.detach().clone()
    dist.all_reduce(total)

    batches = materialize_wave(plan, workload, wave=0)
    model.zero_grad()
    full = run_wave(model, batches)
    full_loss = sum(batch_loss(full[b.packed_index], b) for b in batches)
    full_loss.backward()
    full_grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    return {
        "tokens": batch.num_tokens,
        "num_ranges": len(batch.ranges),
        "packed_tokens": batch.packed_tokens,
        "logits_max_diff": float((logits - full[batch.packed_index]).abs().max())
        if batch.num_tokens
        else 0.0,
        "loss": float(total),
        "loss_diff": abs(float(total) - float(full_loss)),
        "grad_max_diff": float((grads - full_grads).abs().max()),
        "grad_scale": float(full_grads.abs().max()),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"world{n}")
def records(request, tmp_path_factory) -> list[dict]:
    """Start ``world`` worker processes, wait (bounded), and return their records in rank order."""
    world = request.param
    folder = tmp_path_factory.mktemp(f"world{world}")
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(world), str(port), str(folder / f"{rank}.json")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world)
    ]
    outputs = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failed = [
        (r, p.returncode, o[-2000:])
        for r, (p, o) in enumerate(zip(procs, outputs, strict=True))
        if p.returncode
    ]
    assert not failed, f"worker(s) failed: {failed}"
    return [json.loads((folder / f"{rank}.json").read_text()) for rank in range(world)]


def test_ranks_agree_on_the_deterministic_plan(records):
    """Every rank planned alone with the deterministic profile; one all-gather confirmed the same digest
    everywhere, equal to the digest of the same plan made in this process."""
    workload = grpo_workload()
    local = cpplan.plan(workload, topology=Topology(cp=len(records)), **PLAN_ARGS)
    assert {r["digest"] for r in records} == {plan_digest(local, workload)}


def test_disagreeing_rank_is_named_on_every_rank(records):
    """When one rank plans a different workload, every rank raises PlanMismatchError naming exactly that
    rank (no rank hangs or proceeds)."""
    odd = len(records) // 2
    for r in records:
        assert r["mismatch"] is not None
        assert r["mismatch"]["ranks"] == [odd]
        assert f"rank {odd} has" in r["mismatch"]["message"]


@pytest.mark.parametrize("ownership", ["planned", "round_robin"])
def test_cp_ranks_together_equal_the_unsharded_wave(records, ownership):
    """Each rank computed only its owned queries against all-gathered keys and values, for the planner's
    contiguous ranges and for chunks dealt round-robin; its logits equal the unsharded wave's rows, and
    the all-reduced loss and parameter gradients equal the unsharded ones (float64: logits within
    1e-10, loss within 1e-10 relative, gradients within 1e-9 of the largest)."""
    runs = [r["cp"][ownership] for r in records]
    assert sum(run["tokens"] for run in runs) == runs[0]["packed_tokens"]
    assert sum(1 for run in runs if run["tokens"]) >= 2
    if ownership == "round_robin":
        assert max(run["num_ranges"] for run in runs) >= 2
    for run in runs:
        assert run["logits_max_diff"] < 1e-10
        assert run["loss_diff"] < 1e-10 * max(1.0, run["loss"])
        assert run["grad_max_diff"] < 1e-9 * run["grad_scale"]


def test_digest_tracks_plan_and_tokens():
    """The digest is the same for two independent plannings, changes when a chunk changes owner, and,
    given the workload, changes when one token does (same plan shape)."""
    workload = grpo_workload()
    a = cpplan.plan(workload, topology=Topology(cp=2), **PLAN_ARGS)
    b = cpplan.plan(workload, topology=Topology(cp=2), **PLAN_ARGS)
    assert plan_digest(a) == plan_digest(b)
    wave = a.plan.waves[0]
    moved = cpplan.Plan(
        strategy=a.plan.strategy,
        waves=(
            type(wave)(
                **{**wave.__dict__, "owner": np.where(np.arange(wave.owner.size) == 0, 1, wave.owner)}
            ),
            *a.plan.waves[1:],
        ),
    )
    assert plan_digest(moved) != plan_digest(a)
    items = list(workload.items)
    tokens = items[0].requests[0].tokens.copy()
    tokens[-1] = (tokens[-1] + 1) % VOCAB
    items[0] = Item(id="p0", requests=(Request(tokens=tokens), *items[0].requests[1:]))
    changed = Workload(items=tuple(items))
    same_shape = cpplan.plan(changed, topology=Topology(cp=2), **PLAN_ARGS)
    assert plan_digest(same_shape) == plan_digest(a)
    assert plan_digest(same_shape, changed) != plan_digest(a, workload)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
