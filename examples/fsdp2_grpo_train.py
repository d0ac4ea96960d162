"""GRPO steps on a tiny random Qwen3.5-MoE sharded with FSDP2 over a dp=2 x cp=2 pool (four gloo processes).

    python examples/fsdp2_grpo_train.py [--steps 2]

The model is wrapped as torchtitan or verl's FSDP engine would: ``fully_shard`` on each decoder layer and
on the root over all four ranks (a 1-D mesh flattened from the ``(dp, cp)`` mesh), gradients reduced as a
sum (``set_gradient_divide_factor(1.0)``). A GRPO step (two prompts after a shared system prompt, four
sampled completions each, completion-only loss masks) is planned by cpplan for a dp=2 x cp=2 pool; each
process runs *its* GPU's waves (``cpplan.pool_waves``) through the wrapped model with
``cpplan.hf.packed_logprobs(..., distributed=True, group=mesh["cp"])`` and backpropagates the token-mean
policy loss over the step's counted tokens (all-reduced over DP). Under equal waves (the default on a
pool of several CP groups) a GPU with fewer real waves ends its list with ``None`` padding waves, run with
``cpplan.hf.padding_wave`` (an empty forward and backward through every wrapped module, so FSDP's
all-gathers and reduce-scatters line up); ``--memory-gib 5.8`` plans this step unequally (two waves on one
replica, one and a padding wave on the other). At every step rank 0 also runs each
request alone through an unsharded copy of the current weights and prints both losses and the largest
gradient difference (float64 with ``cpplan.hf.float64_internals``: about 1e-12 of the largest gradient).
"""

from __future__ import annotations

import argparse
import socket
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cpplan
import cpplan.hf

VOCAB = 64
DP, CP = 2, 2
MEMORY_GIB = 6.0
"""Per-GPU budget (GiB) under which this step takes two waves, one per DP replica."""


def grpo_workload(seed: int = 0) -> tuple[cpplan.Workload, dict]:
    """Two prompts x four completions after a shared system prompt, completion-only ``loss_mask``s, and
    every request's advantage (reward minus the group mean, over the group std)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, 128)
    items, advantages = [], {}
    for p in range(2):
        prompt = np.concatenate([system, rng.integers(0, VOCAB, int(rng.integers(200, 260)))])
        completions = [rng.integers(0, VOCAB, int(rng.integers(100, 240))) for _ in range(4)]
        rewards = rng.normal(size=len(completions))
        normalised = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        requests = []
        for k, completion in enumerate(completions):
            mask = np.r_[np.zeros(prompt.size, np.int64), np.ones(completion.size, np.int64)]
            requests.append(cpplan.Request(tokens=np.concatenate([prompt, completion]), loss_mask=mask))
            advantages[(f"p{p}", k)] = float(normalised[k])
        items.append(cpplan.Item(id=f"p{p}", requests=tuple(requests)))
    return cpplan.Workload(items=tuple(items)), advantages


def tiny_model(seed: int = 0) -> torch.nn.Module:
    """A random float64 Qwen3.5-MoE: 4 layers (3 Gated DeltaNet + 1 gated attention), 4 experts top-2."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    config = Qwen3_5MoeTextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
    )
    config._experts_implementation = "eager"  # the grouped_mm kernel refuses float64
    torch.manual_seed(seed)
    return Qwen3_5MoeForCausalLM(config).double().train()


def shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """FSDP2 over all ranks: each decoder layer, then the root; gradients summed, not averaged."""
    from torch.distributed.fsdp import fully_shard

    for block in [*model.model.layers, model]:
        fully_shard(block, mesh=mesh["dp", "cp"]._flatten())
        block.set_gradient_divide_factor(1.0)
    return model


def step_tokens(result, workload, waves, dp_group) -> float:
    """The step's counted tokens: those of this replica's waves, summed over the DP replicas."""
    counted = 0
    for wave, wave_rank in (entry for entry in waves if entry is not None):
        for item, k in cpplan.materialize(result, workload, wave=wave, rank=wave_rank).requests:
            counted += int(workload.items[workload.index_of[item]].requests[k].predicted().sum())
    total = torch.tensor(counted)
    dist.all_reduce(total, group=dp_group)
    return float(total)


def wave_loss(model, result, workload, advantages, entry, mesh, denominator) -> torch.Tensor:
    """The loss of one entry of this GPU's list: a real wave's policy loss, or a padding wave's zero."""
    if entry is None:
        return cpplan.hf.padding_wave(model)
    logprobs = cpplan.hf.packed_logprobs(
        model, result, workload, wave=entry[0], distributed=True, group=mesh["cp"]
    )
    return cpplan.hf.policy_loss(logprobs, advantages, workload=workload, denominator=denominator)


def train(rank: int, world: int, port: int, steps: int, memory_gib: float) -> None:
    """One GPU of the pool: plan the step, then ``steps`` AdamW steps over this GPU's waves."""
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    try:
        mesh = init_device_mesh("cpu", (DP, CP), mesh_dim_names=("dp", "cp"))
        workload, advantages = grpo_workload()
        planner = cpplan.Planner(
            model="qwen3.6-35b-a3b",
            topology=cpplan.Topology(cp=CP, dp=DP),
            memory_bytes=int(memory_gib * 2**30),
            solver="deterministic",
        )
        result = planner.plan(workload)
        waves = cpplan.pool_waves(result, rank)  # this GPU's (wave, CP rank) pairs, then None per padding
        model = shard(tiny_model(), mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        if rank == 0:
            lists = [_numbers(cpplan.pool_waves(result, g)) for g in (0, world - 1)]
            print(f"{result.plan.num_waves} waves over {DP} replicas of CP {CP}; GPU 0 runs waves", end=" ")
            print(f"{lists[0]}, GPU {world - 1} runs {lists[1]} (None: a padding wave)")
        for step in range(steps):
            reference = _reference(model, workload, advantages)  # every rank joins the gathers
            optimizer.zero_grad()
            with cpplan.hf.float64_internals():
                denominator = step_tokens(result, workload, waves, mesh["dp"].get_group())
                losses = []
                for entry in waves:
                    loss = wave_loss(model, result, workload, advantages, entry, mesh, denominator)
                    loss.backward()
                    losses.append(loss.detach())
            _report(rank, step, model, sum(losses), mesh, reference)
            optimizer.step()
    finally:
        dist.destroy_process_group()


def _numbers(entries: list) -> list:
    """The wave numbers of a ``pool_waves`` list (``None`` for a padding wave)."""
    return [None if entry is None else entry[0] for entry in entries]


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _reference(model, workload, advantages) -> tuple[torch.Tensor, dict] | None:
    """On rank 0, the unpacked step loss and gradients of the current weights (every rank gathers)."""
    state = {name: _full(p.detach()) for name, p in model.named_parameters()}
    if dist.get_rank() != 0:
        return None
    copy = tiny_model()
    copy.load_state_dict(state)
    with cpplan.hf.float64_internals():
        loss = cpplan.hf.policy_loss(
            cpplan.hf.unpacked_logprobs(copy, workload), advantages, workload=workload
        )
        loss.backward()
    return loss.detach(), {name: p.grad for name, p in copy.named_parameters()}


def _report(rank: int, step: int, model, replica_loss, mesh, reference) -> None:
    """Rank 0 prints the step's packed loss (summed over replicas) and gradients against the unpacked."""
    total = replica_loss.clone()
    dist.all_reduce(total, group=mesh["dp"].get_group())
    grads = {name: _full(p.grad) for name, p in model.named_parameters()}
    if rank != 0:
        return
    want_loss, want = reference
    worst = max(float((grads[n] - g).abs().max() / g.abs().max()) for n, g in want.items())
    print(f"step {step}: loss packed {float(total):+.15f} unpacked {float(want_loss):+.15f}", end=" ")
    print(f"max |grad diff| / max |grad| {worst:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--memory-gib", type=float, default=MEMORY_GIB, help="per-GPU budget")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    arguments = (DP * CP, port, args.steps, args.memory_gib)
    mp.start_processes(train, args=arguments, nprocs=DP * CP, start_method="spawn")


if __name__ == "__main__":
    main()
