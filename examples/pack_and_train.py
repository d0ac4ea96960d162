"""From a dataset to training steps: pack ShareGPT conversations, then train on the pack's waves.

    python examples/pack_and_train.py [--output OUTDIR] [--steps 4]

1. Writes a small ShareGPT file (generated conversations) and packs it with ``cpplan.pack`` for a
   data-parallel replica count of 2 and CP 2 (bytes as tokens, so the reference model's vocabulary of
   512 holds every id). ``cpplan pack DATASET ... --output OUTDIR`` does the same from the shell.
2. Reads the pack back with ``cpplan.PackDataset``: one dataset per (replica, CP rank). A real trainer
   builds the one for its own ranks (``dp_rank``, ``cp_rank`` from torch.distributed); here the two CP
   ranks of replica 0 run in this process, exchanging keys and values by hand.
3. Runs a training step per wave on the reference model: each CP rank computes only the tokens it owns,
   its share of the summed next-token loss comes from the batch's loss pairs, the shares are added,
   and the optimizer steps.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

import cpplan
from cpplan.runtime.reference_model import ReferenceConfig, ReferenceLM, batch_loss, run_simulated_cp

WORDS = ("prefix", "tree", "wave", "rank", "chunk", "token", "budget", "memory", "layer", "plan")


def write_conversations(path: Path, num: int = 24) -> Path:
    """A ShareGPT JSON array of ``num`` conversations of one to three exchanges."""
    generator = torch.Generator().manual_seed(0)

    def text(words: int) -> str:
        picks = torch.randint(len(WORDS), (words,), generator=generator).tolist()
        return " ".join(WORDS[k] for k in picks)

    records = []
    for k in range(num):
        turns = []
        for _ in range(1 + k % 3):
            turns += [{"from": "human", "value": text(8)}, {"from": "gpt", "value": text(24)}]
        records.append({"id": f"c{k}", "conversations": turns})
    path.write_text(json.dumps(records, indent=1))
    return path


def main() -> None:
    """Pack, then train replica 0 on its waves (in a temporary folder, removed at the end, unless
    ``--output`` names one to keep)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="pack folder (default: a temporary one)")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        pack_and_train(args.output, args.steps)
        return
    with tempfile.TemporaryDirectory(prefix="cpplan-pack-") as scratch:
        pack_and_train(Path(scratch) / "pack", args.steps)


def pack_and_train(folder: Path, steps: int) -> None:
    """Pack the generated conversations into ``folder`` (the conversations beside it), then take
    ``steps`` training steps on replica 0's waves."""
    data = write_conversations(folder.parent / f"{folder.name}-conversations.json")
    outcome = cpplan.pack.pack(
        data,
        output=folder,
        model="qwen3-8b",
        topology=cpplan.Topology(cp=2, dp=2),
        memory_bytes="40GiB",
        num_layers=4,
        solver="deterministic",
        window=4,
        tokenizer="bytes",
    )
    manifest = outcome.manifest
    print(f"packed {manifest['items_planned']} conversations into {manifest['waves']} waves in {folder}")
    train(folder, steps)


def train(folder: Path, steps: int) -> None:
    """One training step per wave of replica 0 (both CP ranks in this process), ``steps`` of them."""
    ranks = [cpplan.PackDataset(folder, dp_rank=0, cp_rank=r) for r in (0, 1)]
    torch.manual_seed(0)
    model = ReferenceLM(ReferenceConfig(vocab_size=512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # A None pair is a padding wave of this equal-waves pack: under FSDP or DDP run it as
    # cpplan.hf.padding_wave(model); this one process has no collective to keep in step, so it skips them.
    waves = (batches for batches in zip(*ranks, strict=True) if batches[0] is not None)
    for step, batches in enumerate(waves):
        if step == steps:
            break
        logits = run_simulated_cp(model, batches)
        loss = sum(batch_loss(out, batch) for out, batch in zip(logits, batches, strict=True))
        loss = loss / sum(float(batch.loss_weights.sum()) for batch in batches)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(
            f"step {step}: wave {batches[0].wave}, {batches[0].num_requests} requests, "
            f"{batches[0].packed_tokens} packed tokens, mean loss {loss.item():.4f}"
        )


if __name__ == "__main__":
    main()
