"""Executed seconds of one packed wave with each prompt shared (``full``) against not shared (``none``),
for tiny random Qwen3 models, on this CPU: the evidence the derived card's per-segment price is
calibrated from (:func:`cpplan.spec.config_card.card_from_config`, docs/time_model.md).

Per model size and prompt length: 2 prompts x G = 4 completions (5 to 31 tokens), planned by greedy
with one layout (``full`` or ``none``) under the card derived from the model's config, run with
:func:`cpplan.integrations.packed_step.step_logprobs` and a backward, forward and backward timed,
the two layouts interleaved (full, none, none, full, ...) after a warm-up, 1 thread. Prints a table
(medians, none / full) with the load average and writes ``benchmarks/results/bench_sharing_overhead.json``.
``segment_tokens``: the measured seconds of one extra segment (piece) in units of one token's seconds,
from the two prompt lengths (the per-token seconds from the unshared waves' difference).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from cpplan.integrations.packed_step import step_logprobs
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload
from cpplan.planner import Planner
from cpplan.spec.config_card import card_from_config
from cpplan.spec.profile import load_solver

SHAPES = (
    {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "head_dim": 16,
    },
    {
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "head_dim": 16,
    },
    {
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "head_dim": 32,
    },
    {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "head_dim": 64,
    },
)
"""The how-to's tiny Qwen3 (hidden 32, 2 layers) up to benchmarks/bench_trl_step.py's shape."""
PROMPT_LENGTHS = (14, 64)
VOCAB = 64


def rows(prompt_length: int) -> list[RolloutRow]:
    """2 prompts of ``prompt_length`` (and one more) tokens, 4 completions each of 5 to 31 tokens."""
    rng = np.random.default_rng(0)
    out = []
    for p in range(2):
        prompt = tuple(int(t) for t in rng.integers(3, VOCAB, prompt_length + p))
        for _ in range(4):
            out.append(
                RolloutRow(
                    prompt=prompt,
                    completion=tuple(int(t) for t in rng.integers(3, VOCAB, int(rng.integers(5, 32)))),
                )
            )
    return out


def planned(card, workload, layout: str):
    """The one-wave plan of ``workload`` by greedy with ``layout`` only."""
    base = load_solver("deterministic")
    profile = base.model_copy(
        update={"strategies": ("greedy",), "greedy": base.greedy.model_copy(update={"layouts": (layout,)})}
    )
    result = Planner(model=card, memory_bytes="36GiB", solver=profile).plan(workload)
    assert result.plan.num_waves == 1 and result.plan.waves[0].layout_name == layout
    return result


def timed(model, result, workload) -> float:
    """Seconds of the planned wave's forward and backward."""
    start = time.perf_counter()
    logprobs, _ = step_logprobs(model, result, workload)
    torch.stack([v.sum() for v in logprobs.values()]).sum().backward()
    return time.perf_counter() - start


def measure(shape: dict, repeats: int) -> dict:
    """Both layouts at both prompt lengths for one model size."""
    config = transformers.Qwen3Config(vocab_size=VOCAB, num_key_value_heads=2, use_cache=False, **shape)
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(config).float()
    card = card_from_config(config, dtype_bytes=4)
    out = {"shape": shape, "prompts": {}}
    for length in PROMPT_LENGTHS:
        workload, _ = grouped_workload(rows(length))
        results = {layout: planned(card, workload, layout) for layout in ("full", "none")}
        seconds: dict[str, list[float]] = {"full": [], "none": []}
        for layout in ("full", "none", "full", "none"):  # warm-up
            timed(model, results[layout], workload)
        for k in range(repeats):
            for layout in ("full", "none") if k % 2 == 0 else ("none", "full"):
                model.zero_grad(set_to_none=True)
                seconds[layout].append(timed(model, results[layout], workload))
        entry = {}
        for layout, result in results.items():
            wave = result.plan.waves[0]
            entry[layout] = {
                "median_s": statistics.median(seconds[layout]),
                "spread_s": [min(seconds[layout]), max(seconds[layout])],
                "packed_tokens": wave.packed_tokens,
                "segments": int(wave.quantities[0][3]),
                "priced_s": wave.cost_s,
            }
        entry["none_over_full"] = entry["none"]["median_s"] / entry["full"]["median_s"]
        out["prompts"][str(length)] = entry
    a, b = (out["prompts"][str(n)] for n in PROMPT_LENGTHS)
    token_s = (b["none"]["median_s"] - a["none"]["median_s"]) / (
        b["none"]["packed_tokens"] - a["none"]["packed_tokens"]
    )
    extra = []
    for entry in (a, b):
        saved = entry["none"]["packed_tokens"] - entry["full"]["packed_tokens"]
        added = entry["full"]["segments"] - entry["none"]["segments"]
        extra.append((entry["full"]["median_s"] - entry["none"]["median_s"] + saved * token_s) / added)
    out["token_s"] = token_s
    out["segment_s"] = statistics.fmean(extra)
    out["segment_tokens"] = out["segment_s"] / token_s if token_s > 0 else None
    return out


def print_table(report: dict) -> None:
    """The medians per size and prompt length, the load average beside them."""
    load = f"load average before {report['load_before'][0]:.2f}, after {report['load_after'][0]:.2f}"
    print(f"{load}; 1 thread; medians of {report['repeats']}")
    header = (
        "hidden",
        "layers",
        "prompt",
        "full s",
        "none s",
        "none/full",
        "tokens f/n",
        "segs f/n",
        "seg=tokens",
    )
    print(" ".join(f"{h:>10}" for h in header))
    for size in report["sizes"]:
        for length, e in size["prompts"].items():
            full, none = e["full"], e["none"]
            cells = (
                size["shape"]["hidden_size"],
                size["shape"]["num_hidden_layers"],
                length,
                f"{full['median_s']:.4f}",
                f"{none['median_s']:.4f}",
                f"{e['none_over_full']:.3f}",
                f"{full['packed_tokens']}/{none['packed_tokens']}",
                f"{full['segments']}/{none['segments']}",
                f"{size['segment_tokens'] or float('nan'):.1f}",
            )
            print(" ".join(f"{c:>10}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / "bench_sharing_overhead.json"
    )
    options = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    sizes = [measure(shape, options.repeats) for shape in SHAPES]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "threads": 1,
        "repeats": options.repeats,
        "sizes": sizes,
    }
    print_table(report)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {options.output}")


if __name__ == "__main__":
    main()
