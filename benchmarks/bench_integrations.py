"""What a TRL or verl user gains per step on the GRPO suites.

``python benchmarks/bench_integrations.py [--quick] [--memory 40GiB] [--output PATH]`` prints a table and
writes ``benchmarks/results/bench_integrations.json`` (with ``--quick``,
``./cpplan-bench/bench_integrations_quick.json``: a quick run never overwrites the committed results).
Per GRPO case of :func:`cpplan.bench.suites.suite` (every prompt's G completions in one per-device
batch, Qwen3.6-35B-A3B, one GPU):

- TRL: the tokens ``GRPOTrainer`` runs per log-prob pass (``B * (longest prompt + longest
  completion)``, left/right padded) against the tokens cpplan's ``GRPOTrainer`` runs (the step's plan,
  one item per prompt, prompts shared in the prefix tree). Each step runs three passes (policy,
  reference, and the old policy when TRL needs it), each saving the same.
- verl: its padding-free micro-batches run every sample's tokens unshared, so cpplan's drop-in keeps
  the token count and changes the split: micro-batches and largest micro-batch of verl's own
  ``rearrange_micro_batches`` (cap = the card's one-GPU token capacity at ``--memory``) against
  cpplan's ``prepare_micro_batches``; the tree-packed column is what cpplan's verl engine
  (``CpplanFSDPEngine``, docs/integrations.md) runs with the waves tree-packed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import cpplan
from cpplan.baselines.capacity import card_token_capacity
from cpplan.bench.outputs import ResultFiles
from cpplan.bench.suites import suite
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload

RESULTS = Path(__file__).parent / "results" / "bench_integrations.json"
QUICK_RESULTS = Path("cpplan-bench") / "bench_integrations_quick.json"
"""Where ``--quick`` writes by default: relative to the current directory, away from :data:`RESULTS`."""
CARD = "qwen3.6-35b-a3b"
SYSTEM_TOKENS, REQUEST_TOKENS = 256, 8192


def rows_of(case) -> list[RolloutRow]:
    """The case's requests split into prompt and completion (grpo_ratio's prompt length)."""
    p, c = (int(x) for x in case.name.rsplit("_", 1)[1].split("to"))
    prompt = SYSTEM_TOKENS + REQUEST_TOKENS - max(1, REQUEST_TOKENS * c // (p + c))
    requests = [r for _, _, r in case.build().requests()]
    return [
        RolloutRow(prompt=tuple(r.tokens[:prompt].tolist()), completion=tuple(r.tokens[prompt:].tolist()))
        for r in requests
    ]


def trl_row(rows: list[RolloutRow], planner: cpplan.Planner) -> dict:
    """TRL's padded tokens per pass against cpplan's packed tokens."""
    padded = len(rows) * (max(len(r.prompt) for r in rows) + max(len(r.completion) for r in rows))
    workload, _ = grouped_workload(rows)
    plan = planner.plan(workload).plan
    return {
        "trl_padded_tokens": padded,
        "cpplan_packed_tokens": plan.packed_tokens,
        "cpplan_waves": plan.num_waves,
        "trl_over_cpplan": padded / plan.packed_tokens,
    }


def verl_row(rows: list[RolloutRow], cap: int) -> dict:
    """verl's and cpplan's micro-batches of the same batch (flat tokens, cap ``cap``)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    from cpplan.integrations.verl import prepare_micro_batches

    seqs = [torch.tensor([*r.prompt, *r.completion]) for r in rows]
    masks = [torch.tensor([0] * len(r.prompt) + [1] * len(r.completion)) for r in rows]
    nested = lambda x: torch.nested.as_nested_tensor(x, layout=torch.jagged)  # noqa: E731
    data = tu.get_tensordict(
        {"input_ids": nested(seqs), "loss_mask": nested(masks)},
        {"use_dynamic_bsz": True, "max_token_len_per_gpu": cap},
    )
    sizes = [len(s) for s in seqs]
    _, theirs = rearrange_micro_batches(data, max_token_len=cap)
    _, ours = prepare_micro_batches(data)
    biggest = lambda parts: max(sum(sizes[i] for i in p) for p in parts)  # noqa: E731
    return {
        "flat_tokens": sum(sizes),
        "verl_micro_batches": len(theirs),
        "verl_largest": biggest(theirs),
        "cpplan_micro_batches": len(ours),
        "cpplan_largest": biggest(ours),
        "cap_tokens": cap,
    }


FILES = ResultFiles(results=RESULTS, quick=QUICK_RESULTS)
output_path = FILES.path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick suite's GRPO cases only")
    parser.add_argument("--memory", default="40GiB", help="memory per GPU for a wave (default 40GiB)")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"default {RESULTS.name} in results/; with --quick, ./{QUICK_RESULTS}",
    )
    args = parser.parse_args(argv)
    out = output_path(quick=args.quick, output=args.output)
    planner = cpplan.Planner(model=CARD, memory_bytes=args.memory, solver="deterministic")
    cap = card_token_capacity(planner.card, planner.settings.memory_bytes)
    try:
        from cpplan.integrations import verl as cpplan_verl
    except ImportError:
        cpplan_verl = None
    else:
        cpplan_verl.configure(card=CARD, memory_bytes=args.memory)
    results = []
    for case in (c for c in suite(quick=args.quick) if c.family == "grpo"):
        rows = rows_of(case)
        row = {"case": case.name, "rows": len(rows)} | trl_row(rows, planner)
        if cpplan_verl is not None:
            row |= verl_row(rows, cap)
        results.append(row)
        print(
            " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
            flush=True,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"card": CARD, "memory": args.memory, "cases": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
