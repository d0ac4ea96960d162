"""Shared set-up for the TRL tests: a local word-level tokenizer, a tiny random model saved to disk,
a prompt dataset, a deterministic rollout function (TRL's way to feed completions) and a reward."""

from __future__ import annotations

import hashlib

import torch

WORDS = 60


def tokenizer():
    """A word-level tokenizer built here (no download): ``<pad>``, ``<eos>``, ``<unk>``, ``w0`` .. ``w59``."""
    import tokenizers
    import transformers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {f"w{i}": i + 3 for i in range(WORDS)}
    model = tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def saved_model(family: str, path, dtype: torch.dtype) -> str:
    """A tiny random model of ``family`` (tests/support/hf_models.py) saved under ``path``, in ``dtype``."""
    from tests.support.hf_models import tiny_model

    model = tiny_model(family, layers=2).to(dtype)
    model.config.use_cache = False
    model.save_pretrained(path)
    return str(path)


def dataset(num_prompts: int):
    """Prompts of 12 to 30 words (distinct per prompt), as a ``datasets.Dataset``."""
    import datasets

    prompts = []
    for p in range(num_prompts):
        length = 12 + (7 * p) % 19
        prompts.append(" ".join(f"w{(p * 11 + 3 * i) % WORDS}" for i in range(length)))
    return datasets.Dataset.from_dict({"prompt": prompts})


def rollout(prompts: list, trainer) -> dict:
    """A fixed completion per (prompt, occurrence): 3 to 17 tokens ending in ``<eos>``, so the
    completions of one prompt differ in content and length (TRL pads them to the longest)."""
    tok = trainer.processing_class
    seen: dict[str, int] = {}
    prompt_ids, completion_ids = [], []
    for prompt in prompts:
        k = seen[prompt] = seen.get(prompt, -1) + 1
        digest = hashlib.sha256(f"{prompt}|{k}".encode()).digest()
        length = 3 + digest[0] % 15
        prompt_ids.append(tok(prompt, add_special_tokens=False)["input_ids"])
        completion_ids.append([3 + b % WORDS for b in digest[1 : 1 + length]] + [tok.eos_token_id])
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def reward(completions, **kwargs) -> list[float]:
    """A plain reward: how many distinct words the completion uses, over its length."""
    return [len(set(c.split())) / (1 + len(c.split())) for c in completions]


def config(outdir, **overrides):
    """One optimizer step of GRPO on the CPU: 4 prompts x 4 completions, a KL term (so the reference
    model is scored), steps_per_generation 2 (so the old policy is scored too), no gradient checkpointing
    (its recomputation would leave float64_internals)."""
    import trl

    settings = {
        "output_dir": str(outdir),
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "steps_per_generation": 2,
        "max_steps": 1,
        "learning_rate": 1e-2,
        "beta": 0.04,
        "logging_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "save_strategy": "no",
        "seed": 0,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": False,
    }
    return trl.GRPOConfig(**(settings | overrides))


def make_trainer(cls, path: str, args, **extra):
    """A trainer of ``cls`` (stock TRL's or cpplan's) on the shared set-up: the saved model at
    ``path``, 8 prompts, the fixed rollouts and reward; ``extra`` are cpplan's settings."""
    return cls(
        model=path,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset(8),
        processing_class=tokenizer(),
        rollout_func=rollout,
        **extra,
    )


def initial(path: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The saved model's parameters, by name (to measure how far training moved them)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return {n: p.detach().clone() for n, p in model.named_parameters()}
