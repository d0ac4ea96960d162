"""Plan a GRPO-style workload, materialize every CP rank of its first wave and run the reference model.

    python examples/grpo_reference.py [--cp 4] [--prompts 2] [--group 4]

Each rank computes only the tokens it owns (keys and values of the other ranks are exchanged, here in
one process); the example prints every rank's share and the largest difference between the packed,
CP-sharded logits and the logits of each request run alone, unpacked (float64).
"""

from __future__ import annotations

import argparse

import torch

import cpplan
from cpplan.bench import synthetic
from cpplan.runtime.reference_model import (
    ReferenceConfig,
    ReferenceLM,
    batch_loss,
    next_token_loss,
    run_alone,
    run_simulated_cp,
)

VOCAB = 512


def small_vocab(workload: cpplan.Workload, vocab: int) -> cpplan.Workload:
    """The same workload with token ids folded into the reference model's vocabulary."""
    items = [
        cpplan.Item(
            id=item.id, requests=tuple(cpplan.Request(tokens=r.tokens % vocab) for r in item.requests)
        )
        for item in workload.items
    ]
    return cpplan.Workload(items=tuple(items))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cp", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()

    workload = small_vocab(
        synthetic.grpo(
            num_prompts=args.prompts,
            group_size=args.group,
            system_tokens=128,
            prompt_tokens=384,
            completion_tokens=(64, 160),
        ),
        VOCAB,
    )
    result = cpplan.plan(
        workload,
        topology=cpplan.Topology(cp=args.cp),
        model="qwen3-8b",
        memory_bytes=80 * 2**30,
        solver="deterministic",
    )
    print(result.summary())
    batches = [cpplan.materialize(result.plan, workload, wave=0, rank=r) for r in range(args.cp)]
    wave = result.plan.waves[0]
    print(f"\nwave 0: {len(wave.items)} item(s), {wave.packed_tokens:,} packed of {wave.logical_tokens:,}")
    print(f"{'rank':>4}  {'tokens':>6}  {'loss pairs':>10}  owned ranges")
    for b in batches:
        ranges = ", ".join(f"[{lo}, {hi})" for lo, hi in b.ranges) or "-"
        print(f"{b.rank:>4}  {b.num_tokens:>6}  {b.loss_index.numel():>10}  {ranges}")

    torch.manual_seed(0)
    model = ReferenceLM(ReferenceConfig(vocab_size=VOCAB)).double()
    with torch.no_grad():
        sharded = run_simulated_cp(model, batches)
        packed = torch.empty(batches[0].packed_tokens, VOCAB, dtype=torch.float64)
        for b, logits in zip(batches, sharded, strict=True):
            packed[b.packed_index] = logits
        packed_loss = sum(float(batch_loss(logits, b)) for b, logits in zip(batches, sharded, strict=True))
        max_diff, unpacked_loss = 0.0, 0.0
        for k, (item_id, index) in enumerate(batches[0].requests):
            tokens = torch.from_numpy(
                workload.items[workload.index_of[item_id]].requests[index].tokens.copy()
            )
            alone = run_alone(model, tokens)
            max_diff = max(max_diff, float((packed[batches[0].readback(k)] - alone).abs().max()))
            unpacked_loss += float(next_token_loss(alone, tokens))
    print(
        f"\nmax |packed CP logits - unpacked logits| over {batches[0].num_requests} requests: {max_diff:.3e}"
    )
    print(f"summed loss: packed {packed_loss:.9f}, unpacked {unpacked_loss:.9f}")


if __name__ == "__main__":
    main()
