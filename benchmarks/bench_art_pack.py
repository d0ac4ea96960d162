"""ART's packer against cpplan's ART packer on GRPO and agent steps of ART's shapes.

``python benchmarks/bench_art_pack.py [--repeats 3] [--card qwen3-8b] [--quick]`` prints a table and writes
``benchmarks/results/bench_art_pack.json``. Steps (:data:`cpplan.integrations.art.art_synthetic.GRPO_SHAPES`,
synthetic tokenized results as ART's tokenizer leaves them): ``grpo-2048`` (4 groups of 8, 1,024-token
prompts, 256-1,024-token answers, ``seq_len`` 2,048), ``grpo-8192`` (4 groups of 8, 2,048-token prompts,
512-4,096-token answers, ``seq_len`` 8,192) and ``agent-16384`` (4 groups of 4 six-turn trajectories with
tool outputs, ``seq_len`` 16,384). The memory per rank is the smallest multiple of 256 MiB whose CP1 row
of ``seq_len`` tokens fits under the card (ART's ``seq_len`` tuned for one GPU); at CP ``c`` ART is given
its fixed ``seq_len`` and, in a second line, ``c * seq_len`` (the token count CP ``c`` is expected to
hold); cpplan gets the same ``seq_len`` (no result here is longer than it: nothing is cut) and the same
bytes per rank, and sizes its rows by the floors.

Per step and CP size: rows and padded tokens (rows x columns) of each packer, the predicted step seconds
of each packer's rows under the same card (each row priced as one wave, its shared prompts once, its
padding as one more segment without loss, tokens split over the CP ranks in even contiguous shards as
ART's Megatron path shards them, log-probs at every position as ART's trainers compute them), cpplan's
own plan price (its ownership, no padding), how many of each packer's rows exceed a rank's budget (by
the card's floors), where cpplan's rows came from (``plan``: the plan's waves; ``first_fit``: ART's
first-fit at the floors' row width, kept when it prices cheaper padded), and the wall milliseconds of
each packer (medians of ``--repeats`` interleaved runs, the load average beside them). Predicted, not
measured: no step runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import cpplan
from cpplan.baselines.capacity import card_token_capacity
from cpplan.bench.outputs import QUICK_FOLDER, ResultFiles
from cpplan.integrations.art.art_import import import_art
from cpplan.integrations.art.art_pack import make_planner, pack_results_with_plan
from cpplan.integrations.art.art_pricing import price_rows
from cpplan.integrations.art.art_synthetic import GRPO_SHAPES, art_result_factory, group_results

RESULTS = Path(__file__).parent / "results"
FILES = ResultFiles(results=RESULTS / "bench_art_pack.json", quick=QUICK_FOLDER / "bench_art_pack_quick.json")


def tuned_memory(card: str, seq_len: int) -> int:
    """The smallest multiple of 256 MiB whose CP1 row of ``seq_len`` tokens fits under ``card``."""
    step = 256 * 2**20
    memory = step
    while True:
        planner = cpplan.Planner(model=card, memory_bytes=memory)
        try:
            if card_token_capacity(planner.settings.card, memory) >= seq_len:
                return memory
        except cpplan.InputError:  # below the static floor: not a budget
            pass
        memory += step


def run(*, repeats: int, card: str, quick: bool) -> dict:
    """Every step shape at CP 1, 2 and 4: both packers' rows, prices and wall times."""
    art = import_art()
    make = art_result_factory(art.tokenize.TokenizedResult)
    rows = []
    shapes = dict(list(GRPO_SHAPES.items())[:1]) if quick else GRPO_SHAPES
    for name, shape in shapes.items():
        seq_len = int(name.rsplit("-", 1)[1])
        results = group_results(shape, vocab_size=151_936, seed=0, make=make)
        memory = tuned_memory(card, seq_len)
        for cp, art_len in [(1, seq_len), (2, seq_len), (2, 2 * seq_len), (4, seq_len), (4, 4 * seq_len)]:
            planner = make_planner(memory_bytes=memory, card=card, topology=f"cp={cp}")
            walls: dict[str, list[float]] = {"art": [], "cpplan": []}
            for _ in range(repeats):  # interleaved
                random.seed(0)
                started = time.perf_counter()
                theirs = art.pack.packed_tensors_from_tokenized_results(results, art_len, pad_token_id=0)
                walls["art"].append(time.perf_counter() - started)
                started = time.perf_counter()
                ours = pack_results_with_plan(results, art_len, planner=planner, pad_token_id=0)
                walls["cpplan"].append(time.perf_counter() - started)
            art_price = price_rows(theirs, planner.settings)
            ours_price = price_rows(ours.tensors, planner.settings)
            record = {
                "step": name,
                "cp": cp,
                "memory_bytes": memory,
                "art_seq_len": art_len,
                "num_results": len(results),
                "art_rows": int(theirs["tokens"].shape[0]),
                "cpplan_rows": ours.num_rows,
                "art_padded_tokens": int(theirs["tokens"].numel()),
                "cpplan_padded_tokens": ours.padded_tokens,
                "art_real_tokens": int((theirs["group_ids"] != -1).sum()),
                "cpplan_real_tokens": ours.real_tokens,
                "art_step_s": art_price.step_s,
                "cpplan_step_s": ours_price.step_s,
                "cpplan_plan_step_s": ours.result.plan.cost_s,
                "cpplan_planned_memory_bytes": ours.planned_memory_bytes,
                "art_rows_over_budget": art_price.num_over_budget,
                "cpplan_rows_over_budget": ours_price.num_over_budget,
                "art_pack_ms_median": 1e3 * statistics.median(walls["art"]),
                "cpplan_pack_ms_median": 1e3 * statistics.median(walls["cpplan"]),
                "cpplan_rows_from": ours.strategy,
                "cpplan_plan_strategy": ours.result.strategy,
                "loadavg": os.getloadavg(),
            }
            rows.append(record)
            print_row(record)
    return {"card": card, "repeats": repeats, "openpipe_art": art.version, "rows": rows}


HEADER = (
    f"{'step':<12} {'cp':>2} {'seq_len':>7} {'art rows':>8} {'ours':>5} {'art padded':>11} {'ours':>9} "
    f"{'ratio':>6} {'art s':>8} {'ours s':>8} {'ratio':>6} {'art over':>8} {'art ms':>8} {'ours ms':>8} "
    f"{'rows from':>9} load"
)


def print_row(r: dict) -> None:
    """One table line."""
    print(
        f"{r['step']:<12} {r['cp']:>2} {r['art_seq_len']:>7} {r['art_rows']:>8} {r['cpplan_rows']:>5} "
        f"{r['art_padded_tokens']:>11,} {r['cpplan_padded_tokens']:>9,} "
        f"{r['art_padded_tokens'] / r['cpplan_padded_tokens']:>6.2f} {r['art_step_s']:>8.3f} "
        f"{r['cpplan_step_s']:>8.3f} {r['art_step_s'] / r['cpplan_step_s']:>6.2f} "
        f"{r['art_rows_over_budget']:>4}/{r['art_rows']:<3} {r['art_pack_ms_median']:>8.1f} "
        f"{r['cpplan_pack_ms_median']:>8.1f} {r['cpplan_rows_from']:>9} {r['loadavg'][0]:.2f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--card", default="qwen3-8b")
    parser.add_argument("--quick", action="store_true", help="the first step shape only")
    FILES.add_option(parser)
    args = parser.parse_args(argv)
    print(HEADER)
    data = run(repeats=args.repeats, card=args.card, quick=args.quick)
    out = FILES.path(quick=args.quick, output=args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
