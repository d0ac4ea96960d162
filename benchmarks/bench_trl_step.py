"""Seconds per GRPO step, stock ``trl.GRPOTrainer`` against cpplan's ``GRPOTrainer``, at a CPU shape.

``python benchmarks/bench_trl_step.py [--steps 3] [--quick] [--tiny]`` prints a table and writes
``benchmarks/results/bench_trl_step.json`` (``--tiny``: ``bench_trl_step_tiny.json``, the tests' tiny
Qwen3 size, hidden 32 and 2 layers, with LoRA and gradient checkpointing, prompts of 12 to 30 tokens,
G = 4 completions of 16, 10 timed steps, 1 GiB). Both trainers run the same steps on the same completions
(TRL's ``rollout_func``): a random Qwen3 (hidden 256, FFN 768, 4 layers, 4 query / 2 KV heads of 64, a
vocabulary of 8,195), float32 on the CPU, 2 prompts of 512 to 1,024 tokens per step with G = 8 completions
of 128 tokens each (``max_completion_length`` 128), a KL term (``beta`` 0.04: the reference pass runs
too), one generation per step. cpplan's trainer derives its card from the model's config and plans each
pass under 40 GiB (one wave). Reported per trainer: the median seconds per step over the timed steps
(after a warm-up step), the tokens of one log-prob pass (TRL's padded ``B x (P + C)``, cpplan's packed),
and a cProfile of one more step (not timed): the cumulative seconds of the functions that make a step
(the log-prob passes, the backward, the optimizer, and cpplan's own planning, workload building and
read-back).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"
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
"""The issue's tiny-model case: the tests' tiny Qwen3 size, LoRA (rank 8, every linear layer) with
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


def run(cls, path: str, outdir: Path, steps: int, shape: Shape, **extra) -> dict:
    """Train ``steps + 2`` steps with ``cls``: a warm-up, ``steps`` timed, one profiled (cProfile slows
    what it profiles, so that step is not timed); the timed steps' seconds and the profile."""
    profile_step = steps + 1
    import transformers
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
        model_init_kwargs={"dtype": torch.float32},
    )
    profiler = cProfile.Profile()
    seconds: list[float] = []

    class Clock(transformers.TrainerCallback):
        """Times steps 1 .. ``steps`` (step 0 warms up) and profiles step ``steps + 1``."""

        def on_step_begin(self, args, state, control, **kwargs):
            self.start_s = time.perf_counter()  # state.global_step: the steps done before this one
            if state.global_step == profile_step:
                profiler.enable()

        def on_step_end(self, args, state, control, **kwargs):
            done = state.global_step - 1  # this step's number (global_step counts it now)
            if done == profile_step:
                profiler.disable()
            elif 1 <= done <= steps:
                seconds.append(time.perf_counter() - self.start_s)

    trainer = cls(
        model=path,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset(2 * (steps + 2), shape),
        processing_class=tokenizer(),
        rollout_func=rollout,
        callbacks=[Clock()],
        peft_config=lora_config() if shape.lora else None,
        **extra,
    )
    trainer.train()
    return {"seconds": seconds, "profile": profile_rows(profiler), "trainer": trainer}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=None, help="timed steps per trainer (default 3; 10 --tiny)"
    )
    parser.add_argument("--quick", action="store_true", help="1 timed step each (a smoke run)")
    parser.add_argument("--tiny", action="store_true", help="the tiny LoRA + gradient checkpointing case")
    parser.add_argument(
        "--output", type=Path, default=None, help="default results/bench_trl_step[_tiny].json"
    )
    options = parser.parse_args()
    shape = TINY if options.tiny else REALISTIC
    steps = 1 if options.quick else options.steps or (10 if options.tiny else 3)
    output = options.output or RESULTS / (
        "bench_trl_step_tiny.json" if options.tiny else "bench_trl_step.json"
    )
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    import trl

    from cpplan.integrations.trl import GRPOTrainer

    memory = "1GiB" if options.tiny else "40GiB"
    with tempfile.TemporaryDirectory() as tmp:
        path = saved_model(Path(tmp) / "model", shape)
        runs = {
            "stock": run(trl.GRPOTrainer, path, Path(tmp) / "stock", steps, shape),
            "cpplan": run(GRPOTrainer, path, Path(tmp) / "cpplan", steps, shape, memory_bytes=memory),
        }
    tokens = runs["cpplan"]["trainer"].cpplan_tokens
    report = {
        "shape": asdict(shape)
        | {"vocab": WORDS + 3, "rows_per_step": 2 * shape.num_generations, "dtype": "float32"}
        | {"threads": torch.get_num_threads(), "steps": steps, "memory": memory, "solver": "runtime"},
        "tokens_per_pass": {"stock_padded": tokens.padded, "cpplan_packed": tokens.packed},
        "token_ratio": tokens.padded / tokens.packed,
    }
    for name, result in runs.items():
        report[name] = {
            "step_seconds": result["seconds"],
            "median_step_s": statistics.median(result["seconds"]),
            "profile_s": result["profile"],
        }
    report["speedup"] = report["stock"]["median_step_s"] / report["cpplan"]["median_step_s"]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_table(report)
    print(f"wrote {output}")


def print_table(report: dict) -> None:
    """The step times, the token counts and the two profiles side by side."""
    stock, ours = report["stock"], report["cpplan"]
    print("| | stock TRL | cpplan | stock / cpplan |\n| --- | ---: | ---: | ---: |")
    print(
        f"| median s per step | {stock['median_step_s']:.3f} | {ours['median_step_s']:.3f} | "
        f"{report['speedup']:.2f}x |"
    )
    t, ratio = report["tokens_per_pass"], report["token_ratio"]
    print(f"| tokens per log-prob pass | {t['stock_padded']:,} | {t['cpplan_packed']:,} | {ratio:.2f}x |")
    for label in stock["profile_s"]:
        a, b = stock["profile_s"][label], ours["profile_s"][label]
        ratio = f"{a / b:.2f}x" if a and b else "-"
        print(f"| profile: {label} (s) | {a:.3f} | {b:.3f} | {ratio} |")


if __name__ == "__main__":
    main()
