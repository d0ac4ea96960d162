"""Packed tokens of the reference GRPO step under each sharing layout.

The step (DESIGN.md's GRPO shape): 2 prompts x 8 completions, a 2,048-token system prompt shared by
all, each 8,192-token prompt shared by its 8 completions, 512-token completions. Per layout (``none``,
the system prompt only ``depth:1``, the prompts only ``min_span:4096``, ``full``) the packed tokens of
the whole step in one wave; the logical tokens are the step's tokens unshared.

Usage: ``python benchmarks/grpo_packing.py [--output PATH]`` prints the counts and writes JSON (default:
only printed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from cpplan.bench.synthetic import grpo
from cpplan.pricing.layout import pack, share_mask
from cpplan.pricing.tree import PrefixTree

LAYOUTS = {"none": "none", "system_prompt": "depth:1", "prompts": "min_span:4096", "full": "full"}


def packed_counts() -> dict[str, int]:
    """Logical tokens and packed tokens per layout of the reference GRPO step."""
    workload = grpo(
        num_prompts=2, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512, seed=1
    )
    seqs = [r.tokens for item in workload.items for r in item.requests]
    tree = PrefixTree(seqs)
    flags = np.ones(len(seqs), dtype=bool)
    counts = {"logical": int(sum(len(s) for s in seqs))}
    for name, spec in LAYOUTS.items():
        counts[name] = int(
            pack(tree, np.arange(len(seqs)), share_mask(tree, spec), flags, flags).packed_tokens
        )
    return counts


def main(argv: list[str] | None = None) -> None:
    """Print the counts; write them as JSON when ``--output`` is given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="JSON to write (default: print only)")
    args = parser.parse_args(argv)
    counts = packed_counts()
    for name, tokens in counts.items():
        print(f"{name:14} {tokens:>9,}")
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(counts, indent=1) + "\n")


if __name__ == "__main__":
    main()
