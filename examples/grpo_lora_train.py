"""GRPO-style LoRA training on a tiny random Qwen3.5-MoE, run packed over two gloo CP ranks.

    python examples/grpo_lora_train.py [--steps 3] [--cp 2]

A GRPO workload (a shared system prompt, two prompts, four sampled completions each) is planned by
``cpplan.plan`` for Qwen3.6-35B-A3B at CP 2. Each of the two processes runs its CP rank of the wave
through the model with ``cpplan.hf.packed_logprobs(..., distributed=True)``: the shared prefixes are
computed once, keys/values and Gated DeltaNet states cross the ranks over gloo. The loss is GRPO's
policy-gradient surrogate (group-normalised rewards as advantages, completion tokens only, sequence
mean of token means); both ranks backpropagate it, sum the LoRA gradients and take the same AdamW
step. At every step rank 0 also runs each request alone (unpacked) and prints both losses: in float64
(with ``cpplan.hf.float64_internals``) they agree to about 1e-15.
"""

from __future__ import annotations

import argparse
import socket
import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import cpplan
import cpplan.hf

VOCAB = 64


def grpo_workload(seed: int = 0) -> tuple[cpplan.Workload, dict]:
    """Two prompts x four completions after a shared system prompt, each request carrying its
    completion-only ``loss_mask``; also every request's advantage (reward minus the group mean, over
    the group std)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, 64)
    items, advantages = [], {}
    for p in range(2):
        prompt = np.concatenate([system, rng.integers(0, VOCAB, int(rng.integers(120, 180)))])
        completions = [rng.integers(0, VOCAB, int(rng.integers(60, 160))) for _ in range(4)]
        rewards = rng.normal(size=len(completions))
        normalised = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        requests = []
        for k, completion in enumerate(completions):
            mask = np.r_[np.zeros(prompt.size, np.int64), np.ones(completion.size, np.int64)]
            requests.append(cpplan.Request(tokens=np.concatenate([prompt, completion]), loss_mask=mask))
            advantages[(f"p{p}", k)] = float(normalised[k])
        items.append(cpplan.Item(id=f"p{p}", requests=tuple(requests)))
    return cpplan.Workload(items=tuple(items)), advantages


def lora_model(seed: int = 0) -> torch.nn.Module:
    """A random float64 Qwen3.5-MoE (4 layers: 3 Gated DeltaNet + 1 gated attention, 4 experts top-2)
    with rank-4 LoRA adapters on its attention and GDN projections."""
    from peft import LoraConfig, get_peft_model
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
    base = Qwen3_5MoeForCausalLM(config).double()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj"]
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets)
    return get_peft_model(base, lora).double()


def loss_of(logprobs: dict, workload: cpplan.Workload, advantages: dict) -> torch.Tensor:
    """GRPO's surrogate at ratio 1: minus the advantage-weighted log-probs over the requests' own loss
    masks (completion tokens only), sequence mean of token means."""
    return cpplan.hf.policy_loss(
        logprobs, advantages, reduction="sequence_mean_token_mean", workload=workload
    )


def train(rank: int, world: int, port: int, steps: int) -> None:
    """One CP rank: plan, then ``steps`` optimizer steps on the planned wave."""
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    try:
        workload, advantages = grpo_workload()
        result = cpplan.plan(
            workload,
            topology=cpplan.Topology(cp=world),
            model=cpplan.load_model("qwen3.6-35b-a3b"),
            memory_bytes=80 * 2**30,
            solver=cpplan.load_solver("deterministic"),
        )
        model = lora_model()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        if rank == 0:
            wave = result.plan.waves[0]
            print(f"{len(result.plan.waves)} wave(s); wave 0 packs {wave.logical_tokens} tokens", end=" ")
            needed = sum(r["loss_tokens"] for r in result.to_dict()["waves"][0]["ranks"])
            print(f"into {wave.packed_tokens}, {needed} of them need logits (completion-only masks)")
        for step in range(steps):
            optimizer.zero_grad()
            with cpplan.hf.float64_internals():
                logprobs = cpplan.hf.packed_logprobs(model, result, workload, wave=0, distributed=True)
                loss = loss_of(logprobs, workload, advantages)
                loss.backward()
            cpplan.hf.sum_gradients(model)
            if rank == 0:
                with cpplan.hf.float64_internals(), torch.no_grad():
                    unpacked = loss_of(cpplan.hf.unpacked_logprobs(model, workload), workload, advantages)
                packed = float(loss.detach())
                print(f"step {step}: loss packed {packed:+.15f} unpacked {float(unpacked):+.15f}", end=" ")
                print(f"|diff| {abs(packed - float(unpacked)):.1e}")
            optimizer.step()
        _check_replicas(model)
    finally:
        dist.destroy_process_group()


def _check_replicas(model: torch.nn.Module) -> None:
    """The ranks took identical steps: their trainable weights agree exactly."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    if dist.get_rank() == 0:
        same = all(torch.equal(g, gathered[0]) for g in gathered)
        print("ranks hold identical LoRA weights" if same else "ranks DIVERGED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--cp", type=int, default=2)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(train, args=(args.cp, port, args.steps), nprocs=args.cp, start_method="spawn")


if __name__ == "__main__":
    main()
