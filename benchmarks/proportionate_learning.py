"""One observation on the README example, and the next plan: docs/learning.md's "Proportionate reaction".

``python benchmarks/proportionate_learning.py`` plans ``examples/grpo.jsonl`` (qwen3.6-35b-a3b, CP2,
8 GiB, the ``deterministic`` profile), observes wave 0's busiest rank at a peak 8.6% and seconds 24%
above the prediction, plans again, and plans with the true card (the card scaled exactly by the
observed ratios); it prints the three plans as the doc's table and the next plan's card seconds over
the true card's plan's; ``--output PATH`` also writes the table's rows and those figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cpplan  # noqa: E402
from tests.calibration.test_proportionate_learning import card_seconds, true_card_plan  # noqa: E402


def row(name: str, result: cpplan.PlanResult, memory_scale: str, time_scale: str) -> str:
    """One plan as a row of the doc's table."""
    x = result.to_dict()
    cells = (
        name,
        x["num_waves"],
        f"{x['cost_s']:.3f} s",
        f"{x['packed_tokens']:,}",
        memory_scale,
        time_scale,
    )
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main(argv: list[str] | None = None) -> None:
    """Plan, observe once, plan again; print the table (and write it as JSON with ``--output``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="JSON to write (default: print only)")
    args = parser.parse_args(argv)
    planner = cpplan.Planner(
        model="qwen3.6-35b-a3b", topology="cp=2", memory_bytes="8GiB", solver="deterministic"
    )
    workload = cpplan.Workload.from_jsonl(ROOT / "examples" / "grpo.jsonl")
    first = planner.plan(workload)
    wave = first.to_dict()["waves"][0]
    rank = max(wave["ranks"], key=lambda r: r["peak_bytes"])
    peak = round(1.086 * rank["peak_bytes"])
    planner.observe(first, wave=0, rank=rank["rank"], peak_bytes=peak, seconds=1.24 * wave["cost_s"])
    k_memory = planner.learning.verdicts("memory")[0].ratio
    k_time = planner.learning.verdicts("time")[0].ratio
    learned = planner.plan(workload)
    truth = true_card_plan(planner, workload, k_memory, k_time)
    scales = (f"{planner.correction.memory_scale:.6g}", f"{planner.correction.time_scale:.6g}")
    print("| plan | waves | predicted step | packed tokens | memory scale | time scale |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(row("before the observation", first, "1", "1"))
    print(row("next plan", learned, *scales))
    true_name = f"the true card's plan (scales exactly {k_memory:.3f}, {k_time:.3f})"
    print(row(true_name, truth, f"{k_memory:.3f}", f"{k_time:.3f}"))
    print(f"\nnext plan / true card's plan (card seconds): {card_seconds(learned) / card_seconds(truth):.2f}")
    predicted, observed = rank["peak_bytes"] / 2**30, peak / 2**30
    print(f"first plan's busiest rank: {predicted:.2f} GiB predicted, {observed:.2f} GiB observed")
    splits = any(w["split"] for w in learned.to_dict()["waves"])
    print(f"next plan splits an item: {splits}")
    if args.output is not None:
        plans = {"first": first, "next": learned, "true_card": truth}
        data = {
            name: {"num_waves": r.plan.num_waves, "cost_s": r.cost_s, "packed_tokens": r.plan.packed_tokens}
            for name, r in plans.items()
        }
        data |= {
            "memory_scale": planner.correction.memory_scale,
            "time_scale": planner.correction.time_scale,
            "ratios": [k_memory, k_time],
            "next_over_true": card_seconds(learned) / card_seconds(truth),
            "busiest_gib": [predicted, observed],
            "next_splits": splits,
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
