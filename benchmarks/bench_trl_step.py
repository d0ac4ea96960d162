"""Seconds per TRL GRPO step on the CPU: stock ``trl.GRPOTrainer`` against cpplan's (issue 33).

``python benchmarks/bench_trl_step.py [--family qwen3_5_moe] [--steps 8] [--repeats 3]`` prints a table
and writes ``benchmarks/results/bench_trl_step.json``. The set-up is the TRL tests' own
(``tests/integrations/trl_setup.py``): a tiny random model of ``--family`` (two layers, float32), 8
prompts x 4 fixed completions through TRL's ``rollout_func``, a KL term (so the reference model is
scored) and two steps per generation (so the old policy is scored too), SGD, one intra-op thread.
cpplan's trainer plans with the ``deterministic`` profile (as the tests do) for the shipped
Qwen3.6-35B-A3B card at 8 GiB.

Each run trains ``--steps`` steps and times every step (a trainer callback, from step begin to step
end: generation, scoring and the passes, backward and the optimizer); the first step of a run is left
out (first-call work: lazy imports, allocator warm-up) and reported apart, with the seconds to make
the trainer (cpplan's makes its planner: the card, OR-Tools warmed up). Reported: per trainer the
median step over every run, the median of the generation steps (steps 2, 4, ... counted from 0: old
policy, reference and policy passes) and of the others (the policy pass only), and cpplan's over
stock's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CPPLAN = {"card": "qwen3.6-35b-a3b", "memory_bytes": "8GiB", "solver": "deterministic"}


def step_seconds(which: str, family: str, steps: int, folder: Path) -> tuple[float, list[float]]:
    """Seconds to make the trainer and of each step of one training run of ``which`` (``"stock"`` or
    ``"cpplan"``)."""
    import transformers
    import trl

    from cpplan.integrations.trl import GRPOTrainer
    from tests.integrations import trl_setup

    class Clock(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.started = 0.0

        def on_step_begin(self, args, state, control, **kwargs) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs) -> None:
            self.seconds.append(time.perf_counter() - self.started)

    path = trl_setup.saved_model(family, folder / "model", torch.float32)
    args = trl_setup.config(
        folder / which, model_init_kwargs={"dtype": torch.float32}, optim="sgd", max_steps=steps
    )
    cls, extra = (GRPOTrainer, CPPLAN) if which == "cpplan" else (trl.GRPOTrainer, {})
    clock = Clock()
    started = time.perf_counter()
    trainer = cls(
        model=path,
        reward_funcs=trl_setup.reward,
        args=args,
        train_dataset=trl_setup.dataset(8),
        processing_class=trl_setup.tokenizer(),
        rollout_func=trl_setup.rollout,
        callbacks=[clock],
        **extra,
    )
    made_s = time.perf_counter() - started
    trainer.train()
    return made_s, clock.seconds


def summary(made: list[float], runs: list[list[float]]) -> dict:
    """Medians over the runs' steps, the first of each run apart; the median time to make the trainer."""
    kept = [(k, s) for run in runs for k, s in enumerate(run) if k > 0]
    generation = [s for k, s in kept if k % 2 == 0]
    other = [s for k, s in kept if k % 2 == 1]
    return {
        "median_step_s": statistics.median(s for _, s in kept),
        "median_generation_step_s": statistics.median(generation) if generation else None,
        "median_other_step_s": statistics.median(other) if other else None,
        "median_first_step_s": statistics.median(run[0] for run in runs),
        "median_make_trainer_s": statistics.median(made),
        "steps": [[round(s, 4) for s in run] for run in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--family", default="qwen3_5_moe", choices=["qwen3", "qwen3_5_moe"])
    parser.add_argument("--steps", type=int, default=8, help="steps per run (the first is left out)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per trainer, alternating")
    parser.add_argument("--output", type=Path, default=RESULTS / "bench_trl_step.json")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the TRL tests' set-up
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(1)
    runs: dict[str, list[list[float]]] = {"stock": [], "cpplan": []}
    made: dict[str, list[float]] = {"stock": [], "cpplan": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for which in runs:
                made_s, seconds = step_seconds(which, args.family, args.steps, Path(tmp) / f"{which}{repeat}")
                made[which].append(made_s)
                runs[which].append(seconds)
    result = {which: summary(made[which], r) for which, r in runs.items()}
    result["settings"] = {
        "family": args.family,
        "steps": args.steps,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
    }
    result["cpplan_over_stock"] = result["cpplan"]["median_step_s"] / result["stock"]["median_step_s"]
    print("| trainer | median step s | generation steps s | other steps s | first step s | make trainer s |")
    print("|---|---|---|---|---|---|")
    for which in runs:
        r = result[which]
        print(
            f"| {which} | {r['median_step_s']:.3f} | {r['median_generation_step_s']:.3f} | "
            f"{r['median_other_step_s']:.3f} | {r['median_first_step_s']:.3f} | "
            f"{r['median_make_trainer_s']:.3f} |"
        )
    print(f"\ncpplan / stock (median step): {result['cpplan_over_stock']:.2f}x")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"saved {args.output}")


if __name__ == "__main__":
    main()
