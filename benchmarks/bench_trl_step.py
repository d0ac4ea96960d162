"""Seconds per GRPO step, stock ``trl.GRPOTrainer`` against cpplan's ``GRPOTrainer``, interleaved.

``python benchmarks/bench_trl_step.py [--steps 5] [--busy 0,2] [--quick] [--tiny] [--output PATH]`` prints a
table and writes ``benchmarks/results/bench_trl_step.json`` (``--quick``: ``./cpplan-bench/*_quick.json``;
``--tiny``: ``bench_trl_step_tiny.json``, the tests'
tiny Qwen3 size, hidden 32 and 2 layers, with LoRA and gradient checkpointing, prompts of 12 to 30
tokens, G = 4 completions of 16, 1 GiB). Both trainers run in one process, on the same model and the same
completions (TRL's ``rollout_func``), their steps taking turns: a warm-up step each, then ``--steps``
timed steps each in the order stock, cpplan, cpplan, stock, stock, ... (so a drift of the machine's speed
falls on both alike), then one profiled step each (cProfile slows what it profiles, so that step is not
timed). Each trainer runs TRL's own training loop on its own thread, and a baton lets one step run at a
time; before a step's clock starts, the other trainer's plans made ahead are drained (cpplan's
``PlanAhead`` plans in a worker process), so no trainer's background work falls inside the other's timed
step. cpplan's planning seconds inside each timed step (taking a plan made ahead, or planning then) are
reported on their own. The model: a random Qwen3 (hidden 256, FFN 768, 4 layers, 4 query / 2 KV heads of
64, a vocabulary of 8,195), float32 on the CPU, attention pinned to ``sdpa`` for both (recorded), 2
prompts of 512 to 1,024 tokens per step with G = 8 completions of 128 tokens each, a KL term (``beta``
0.04: the reference pass runs too), one generation per step. cpplan's trainer derives its card from the
model's config and plans each pass with its default ``trainer`` profile (deterministic work limits)
under 40 GiB (one wave).

``--busy 0,2`` runs the whole comparison once per entry, with that many busy processes (a Python spin
loop each) beside it: 0 is the quiet machine, 2 loads both cores of the development machine. Reported
per run: the load average at its start and end, each trainer's step seconds (median, min, max), the
ratio of the medians and of each interleaved pair, the tokens of one log-prob pass (TRL's padded
``B x (P + C)``, cpplan's packed, every timed step's) and the profile rows (cumulative seconds of the
functions that make a step: the log-prob passes, the backward, the optimizer, and cpplan's planning,
workload building and read-back).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import hashlib
import json
import os
import pstats
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import cpplan
from cpplan.bench.load import busy_processes

RESULTS = Path(__file__).parent / "results"
QUICK_FOLDER = Path("cpplan-bench")
WORDS = 8192


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The model and the step: sizes, prompt lengths, completions, and the training options."""

    hidden: int = 256
    ffn: int = 768
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    prompt_tokens: tuple[int, int] = (512, 1024)
    num_generations: int = 8
    completion_tokens: int = 128
    lora: bool = False
    gradient_checkpointing: bool = False


REALISTIC = Shape()
TINY = Shape(
    hidden=32,
    ffn=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    prompt_tokens=(12, 30),
    num_generations=4,
    completion_tokens=16,
    lora=True,
    gradient_checkpointing=True,
)
"""The tiny-model case: the tests' tiny Qwen3 size, LoRA (rank 8, every linear layer) with
gradient checkpointing."""
PROFILED = {
    "log-prob passes": "_get_per_token_logps_and_entropies",
    "backward": "backward",
    "optimizer step": "step",
    "cpplan: plan": "plan",
    "cpplan: rows and workload": "grouped_workload",
    "cpplan: padded rows": "padded_rows",
    "cpplan: packed waves": "step_logprobs",
    "cpplan: read-back": "_scatter",
}
"""Rows of the profile table: a label and the function name whose cumulative seconds it shows (the
largest entry of that name: ``plan`` is the planner's, ``step`` the optimizer's)."""


def tokenizer():
    """A word-level tokenizer: ``<pad>``, ``<eos>``, ``<unk>``, ``w0`` .. ``w8191``."""
    import tokenizers
    import transformers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {f"w{i}": i + 3 for i in range(WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def saved_model(path: Path, shape: Shape) -> str:
    """The random Qwen3 of ``shape``, saved under ``path`` (float32)."""
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=WORDS + 3,
        hidden_size=shape.hidden,
        intermediate_size=shape.ffn,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=4096,
        use_cache=False,
        eos_token_id=1,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).save_pretrained(path)
    return str(path)


def dataset(num_prompts: int, shape: Shape):
    """Distinct prompts of ``shape.prompt_tokens`` words (the range, inclusive)."""
    import datasets

    low, high = shape.prompt_tokens
    prompts = []
    for p in range(num_prompts):
        length = low + (p * 389) % (high - low + 1)
        prompts.append(" ".join(f"w{(p * 977 + 13 * i) % WORDS}" for i in range(length)))
    return datasets.Dataset.from_dict({"prompt": prompts})


def rollout(prompts: list, trainer) -> dict:
    """A fixed completion of ``max_completion_length`` tokens (the last ``<eos>``) per (prompt,
    occurrence)."""
    tok, num_tokens = trainer.processing_class, trainer.args.max_completion_length
    seen: dict[str, int] = {}
    prompt_ids, completion_ids = [], []
    for prompt in prompts:
        k = seen[prompt] = seen.get(prompt, -1) + 1
        digest = hashlib.sha256(f"{prompt}|{k}".encode()).digest() * 8
        prompt_ids.append(tok(prompt, add_special_tokens=False)["input_ids"])
        body = [3 + (digest[2 * i] * 256 + digest[2 * i + 1]) % WORDS for i in range(num_tokens - 1)]
        completion_ids.append([*body, tok.eos_token_id])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def reward(completions, **kwargs) -> list[float]:
    """Distinct words over length (any reward will do: the step's cost does not depend on it)."""
    return [len(set(c.split())) / (1 + len(c.split())) for c in completions]


class Baton:
    """Lets one trainer's step run at a time, in ``order`` (trainer names, one entry a step)."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.turn = 0
        self.ready = threading.Condition()

    def wait(self, name: str) -> None:
        """Block until it is ``name``'s turn (or every turn is taken: then steps run freely)."""
        with self.ready:
            self.ready.wait_for(lambda: self.turn >= len(self.order) or self.order[self.turn] == name)

    def done(self) -> None:
        """End the running step's turn."""
        with self.ready:
            self.turn += 1
            self.ready.notify_all()


def turns(steps: int) -> list[str]:
    """A warm-up step each, ``steps`` timed steps each as stock, cpplan, cpplan, stock, ..., then a
    profiled step each."""
    timed = [name for i in range(steps) for name in (NAMES if i % 2 == 0 else NAMES[::-1])]
    return [*NAMES, *timed, *NAMES]


NAMES = ("stock", "cpplan")


def trainer_of(cls, path: str, outdir: Path, steps: int, shape: Shape, callback, **extra):
    """A GRPO trainer of ``cls`` for ``steps + 2`` steps, its steps clocked by ``callback``."""
    import trl

    args = trl.GRPOConfig(
        output_dir=str(outdir),
        per_device_train_batch_size=2 * shape.num_generations,
        num_generations=shape.num_generations,
        steps_per_generation=1,
        max_completion_length=shape.completion_tokens,
        max_steps=steps + 2,
        learning_rate=1e-5,
        beta=0.04,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        gradient_checkpointing=shape.gradient_checkpointing,
        disable_tqdm=True,
        model_init_kwargs={"dtype": torch.float32, "attn_implementation": ATTENTION},
    )
    return cls(
        model=path,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset(2 * (steps + 2), shape),
        processing_class=tokenizer(),
        rollout_func=rollout,
        callbacks=[callback],
        peft_config=lora_config() if shape.lora else None,
        **extra,
    )


ATTENTION = "sdpa"
"""The attention implementation both trainers' models load with (cpplan's packed waves run their own
tree attention through ``scaled_dot_product_attention`` either way)."""


def clock(name: str, baton: Baton, steps: int, record: dict, records: dict[str, dict]):
    """A callback that waits for ``name``'s turn at each step, drains the other trainers' plans made
    ahead, times steps 1 .. ``steps`` (step 0 warms up), profiles step ``steps + 1`` and keeps cpplan's
    packed tokens and planning seconds of each timed step."""
    import transformers

    profiler = cProfile.Profile()
    record.update(seconds=[], packed=[], padded=[], plan_s=[], planning=[0.0], profiler=profiler)

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            baton.wait(name)
            for other, theirs in records.items():
                ahead = getattr(theirs.get("trainer"), "cpplan_ahead", None)
                if other != name and ahead is not None:
                    ahead.drain()
            record["planning"][0] = 0.0
            self.start_s = time.perf_counter()
            if state.global_step == steps + 1:  # the steps done before this one
                profiler.enable()

        def on_step_end(self, args, state, control, **kwargs):
            elapsed = time.perf_counter() - self.start_s
            done = state.global_step - 1  # this step's number (global_step counts it now)
            if done == steps + 1:
                profiler.disable()
            elif 1 <= done <= steps:
                record["seconds"].append(elapsed)
                tokens = getattr(record.get("trainer"), "cpplan_tokens", None)
                record["packed"].append(tokens.packed if tokens is not None else None)
                record["padded"].append(tokens.padded if tokens is not None else None)
                record["plan_s"].append(record["planning"][0])
            baton.done()

    return Clock()


def compare(path: str, tmp: Path, steps: int, shape: Shape, memory: str) -> dict:
    """Both trainers' steps, taking turns (:func:`turns`); per trainer its record."""
    import trl

    from cpplan.integrations.trl import GRPOTrainer

    baton = Baton(turns(steps))
    records: dict[str, dict] = {name: {} for name in NAMES}
    classes = {"stock": (trl.GRPOTrainer, {}), "cpplan": (GRPOTrainer, {"memory_bytes": memory})}
    for name, (cls, extra) in classes.items():
        callback = clock(name, baton, steps, records[name], records)
        records[name]["trainer"] = trainer_of(cls, path, tmp / name, steps, shape, callback, **extra)
    timed_planning(records["cpplan"])
    threads = [threading.Thread(target=records[name]["trainer"].train, name=name) for name in NAMES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return records


def timed_planning(record: dict) -> None:
    """Count the seconds cpplan's trainer spends getting its plans (``_cpplan_plan``: a plan made ahead
    taken, or one planned then) into ``record["planning"]``."""
    trainer = record["trainer"]
    get = trainer._cpplan_plan

    def timed(workload, key):
        t0 = time.perf_counter()
        try:
            return get(workload, key)
        finally:
            record["planning"][0] += time.perf_counter() - t0

    trainer._cpplan_plan = timed


def measured_run(path: str, tmp: Path, steps: int, shape: Shape, memory: str, busy: int) -> dict:
    """One comparison beside ``busy`` busy processes: its load averages, step times, tokens, profiles."""
    with busy_processes(busy):
        load_start = os.getloadavg()
        records = compare(path, tmp / f"busy{busy}", steps, shape, memory)
        load_end = os.getloadavg()
    tokens = records["cpplan"]["trainer"].cpplan_tokens
    run = {
        "busy_processes": busy,
        "load_average_start": list(load_start),
        "load_average_end": list(load_end),
        "attention": {name: records[name]["trainer"].model.config._attn_implementation for name in NAMES},
        "tokens_per_pass": {
            "stock_padded": tokens.padded,
            "cpplan_packed": tokens.packed,
        },
        "cpplan_packed_per_step": records["cpplan"]["packed"],
        "stock_padded_per_step": records["cpplan"]["padded"],
        "cpplan_solver": records["cpplan"]["trainer"].cpplan_planner.profile.name,
        "cpplan_source": str(Path(cpplan.__file__).parent),
    }
    for name in NAMES:
        seconds = records[name]["seconds"]
        run[name] = {
            "step_seconds": seconds,
            "median_step_s": statistics.median(seconds),
            "min_step_s": min(seconds),
            "max_step_s": max(seconds),
            "profile_s": profile_rows(records[name]["profiler"]),
        }
    pairs = [a / b for a, b in zip(run["stock"]["step_seconds"], run["cpplan"]["step_seconds"], strict=True)]
    run["cpplan"]["plan_seconds_per_step"] = records["cpplan"]["plan_s"]
    run["cpplan"]["median_plan_s"] = statistics.median(records["cpplan"]["plan_s"])
    run["cpplan"]["plans_taken_ahead"] = records["cpplan"]["trainer"].cpplan_ahead.num_taken
    run["speedup"] = run["stock"]["median_step_s"] / run["cpplan"]["median_step_s"]
    run["pair_speedups"] = pairs
    run["token_ratio"] = sum(records["cpplan"]["padded"]) / sum(records["cpplan"]["packed"])
    return run


def lora_config():
    """LoRA of rank 8 on every linear layer."""
    import peft

    return peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")


def profile_rows(profiler: cProfile.Profile) -> dict[str, float]:
    """Cumulative seconds per :data:`PROFILED` row (0 where the step never called it)."""
    stats = pstats.Stats(profiler).stats
    rows = {"step total": max((entry[3] for entry in stats.values()), default=0.0)}
    for label, name in PROFILED.items():
        matching = [entry[3] for (_, _, function), entry in stats.items() if function == name]
        rows[label] = max(matching, default=0.0)
    return rows


def output_path(*, quick: bool, tiny: bool, output: Path | None) -> Path:
    """The JSON a run writes: ``output`` when given; else the committed file in :data:`RESULTS` for a
    full run and ``./cpplan-bench/`` for a quick one (one timed step: not the cited figures)."""
    if output is not None:
        return output
    name = "bench_trl_step_tiny" if tiny else "bench_trl_step"
    return QUICK_FOLDER / f"{name}_quick.json" if quick else RESULTS / f"{name}.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per trainer and run (default 5)")
    parser.add_argument(
        "--busy", default="0,2", help="busy processes beside each run, comma-separated (default 0,2)"
    )
    parser.add_argument("--quick", action="store_true", help="1 timed step each, quiet only (a smoke run)")
    parser.add_argument("--tiny", action="store_true", help="the tiny LoRA + gradient checkpointing case")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="default results/bench_trl_step[_tiny].json; with --quick, "
        "./cpplan-bench/bench_trl_step[_tiny]_quick.json",
    )
    options = parser.parse_args()
    shape = TINY if options.tiny else REALISTIC
    steps = 1 if options.quick else options.steps
    loads = [0] if options.quick else [int(b) for b in options.busy.split(",")]
    output = output_path(quick=options.quick, tiny=options.tiny, output=options.output)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    memory = "1GiB" if options.tiny else "40GiB"
    with tempfile.TemporaryDirectory() as tmp:
        path = saved_model(Path(tmp) / "model", shape)
        runs = [measured_run(path, Path(tmp), steps, shape, memory, busy) for busy in loads]
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "versions": versions(),
        "shape": asdict(shape)
        | {"vocab": WORDS + 3, "rows_per_step": 2 * shape.num_generations, "dtype": "float32"}
        | {"steps": steps, "memory": memory, "attention": ATTENTION},
        "runs": runs,
        "plan_same_under_load": len({tuple(run["cpplan_packed_per_step"]) for run in runs}) == 1,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for run in runs:
        print_table(run)
    print(f"plans the same under every load: {report['plan_same_under_load']}")
    print(f"wrote {output}")


def versions() -> dict[str, str]:
    """The versions of what the step runs on."""
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def print_table(run: dict) -> None:
    """One run's step times, pair ratios, token counts and the two profiles side by side."""
    stock, ours = run["stock"], run["cpplan"]
    start, end = run["load_average_start"], run["load_average_end"]
    print(
        f"\n{run['busy_processes']} busy processes; load average {start[0]:.2f} at the start, "
        f"{end[0]:.2f} at the end; attention {run['attention']}; cpplan solver {run['cpplan_solver']}"
    )
    print("| | stock TRL | cpplan | stock / cpplan |\n| --- | ---: | ---: | ---: |")
    print(
        f"| median s per step | {stock['median_step_s']:.3f} | {ours['median_step_s']:.3f} | "
        f"{run['speedup']:.2f}x |"
    )
    spread = f"{min(run['pair_speedups']):.2f}x-{max(run['pair_speedups']):.2f}x"
    print(
        f"| min-max s per step | {stock['min_step_s']:.3f}-{stock['max_step_s']:.3f} | "
        f"{ours['min_step_s']:.3f}-{ours['max_step_s']:.3f} | pairs {spread} |"
    )
    print(
        f"| cpplan planning s per step (median; plans taken ahead {ours['plans_taken_ahead']}) | | "
        f"{ours['median_plan_s']:.3f} | |"
    )
    t, ratio = run["tokens_per_pass"], run["token_ratio"]
    padded, packed = sum(run["stock_padded_per_step"]), sum(run["cpplan_packed_per_step"])
    print(f"| tokens of the timed steps' loss passes | {padded:,} | {packed:,} | {ratio:.2f}x |")
    print(f"| tokens of the last pass | {t['stock_padded']:,} | {t['cpplan_packed']:,} | |")
    for label in stock["profile_s"]:
        a, b = stock["profile_s"][label], ours["profile_s"][label]
        ratio = f"{a / b:.2f}x" if a and b else "-"
        print(f"| profile: {label} (s) | {a:.3f} | {b:.3f} | {ratio} |")


if __name__ == "__main__":
    main()
