"""What stopped a TRL user of cpplan's GRPOTrainer, each tried against stock ``trl.GRPOTrainer`` on the
same completions: a micro-batch whose completions are all masked (``mask_truncated_completions``), PEFT
prompt tuning, and a model of the user's own without a named card."""

from __future__ import annotations

import logging
import os

import pytest
import torch

pytest.importorskip("trl", reason="the trl extra is not installed")
pytest.importorskip("datasets", reason="TRL's datasets dependency is not installed")

import trl

import cpplan
from cpplan.errors import InputError
from cpplan.hf import float64_internals
from cpplan.integrations.trl import GRPOTrainer
from tests.integrations import trl_setup
from tests.support.hf_models import one_thread  # noqa: F401

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
CPPLAN = {"card": "qwen3.6-35b-a3b", "memory_bytes": "8GiB", "solver": "deterministic"}
MAX_COMPLETION = 16


def truncating_rollout(truncated_calls: set[int]):
    """``trl_setup.rollout``, except that on the listed calls (0-based) every completion is
    ``MAX_COMPLETION`` tokens without ``<eos>``: truncated, so TRL masks them all."""
    calls = []

    def rollout(prompts, trainer):
        out = trl_setup.rollout(prompts, trainer)
        if len(calls) in truncated_calls:
            words = trl_setup.WORDS
            out["completion_ids"] = [
                [3 + (7 * i + j) % words for j in range(MAX_COMPLETION)] for i in range(len(prompts))
            ]
        calls.append(len(prompts))
        return out

    return rollout


def run(cls, path, outdir, *, rollout, cpplan=None, peft_config=None, **overrides):
    """Train ``cls`` (float64, float64 internals) on the shared set-up; the trainer after training
    (``initial_parameters``: its parameters before)."""
    extra = (CPPLAN if cpplan is None else cpplan) if cls is GRPOTrainer else {}
    args = trl_setup.config(outdir, model_init_kwargs={"dtype": torch.float64}, **overrides)
    tr = cls(
        model=path,
        reward_funcs=trl_setup.reward,
        args=args,
        train_dataset=trl_setup.dataset(8),
        processing_class=trl_setup.tokenizer(),
        rollout_func=rollout,
        peft_config=peft_config,
        **extra,
    )
    tr.initial_parameters = parameters(tr)
    with float64_internals():
        tr.train()
    return tr


def losses(tr) -> list[float]:
    """The logged training losses, in order."""
    return [log["loss"] for log in tr.state.log_history if "loss" in log]


def parameters(tr) -> dict[str, torch.Tensor]:
    """The trainer's parameters by name, detached."""
    return {n: p.detach().clone() for n, p in tr.model.named_parameters()}


def test_all_masked_micro_batch_trains_as_stock(tmp_path):
    """``mask_truncated_completions`` with a second step whose completions all reach
    ``max_completion_length``: its micro-batch is all masked. Stock TRL gives a differentiable zero (loss
    0, every gradient 0) and SGD with momentum still steps on the first step's momentum; cpplan's trainer
    (which raised in backward) gives the same zero loss and the same parameters (1e-9), which moved in
    that step (a parameter left without a gradient would not have moved)."""
    path = trl_setup.saved_model("qwen3", tmp_path / "model", torch.float64)
    options = {"steps_per_generation": 1, "max_steps": 2, "mask_truncated_completions": True}
    options |= {"optim": "sgd", "optim_args": "momentum=0.9"}
    options |= {"max_completion_length": MAX_COMPLETION}
    runs = {}
    for cls in (trl.GRPOTrainer, GRPOTrainer):
        tr = run(cls, path, tmp_path / cls.__module__, rollout=truncating_rollout({1}), **options)
        runs[cls] = losses(tr), parameters(tr), tr
    (stock_losses, stock, _), (ours_losses, ours, tr) = runs[trl.GRPOTrainer], runs[GRPOTrainer]
    assert stock_losses[1] == 0.0 and ours_losses[1] == 0.0
    assert ours_losses == pytest.approx(stock_losses, rel=1e-9)
    assert max(float((ours[n] - stock[n]).abs().max()) for n in stock) < 1e-9
    one = options | {"max_steps": 1}
    first = parameters(run(trl.GRPOTrainer, path, tmp_path / "one", rollout=truncating_rollout({1}), **one))
    assert max(float((stock[n] - first[n]).abs().max()) for n in stock) > 1e-6  # the zero step moved them


def test_prompt_tuning_trains_as_stock(tmp_path, caplog):
    """PEFT prompt tuning (4 virtual tokens, which peft prepends to every row inside its forward): cpplan's
    trainer (which raised ``'Tensor' object has no attribute 'last_hidden_state'``) logs why its passes
    run TRL's own path and then gives stock TRL's two SGD steps: the same losses (1e-9 relative) and the
    same trained prompt embeddings (1e-9), which moved."""
    peft = pytest.importorskip("peft", reason="peft is not installed")
    path = trl_setup.saved_model("qwen3", tmp_path / "model", torch.float64)
    config = peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    runs = {}
    for cls in (trl.GRPOTrainer, GRPOTrainer):
        with caplog.at_level(logging.WARNING, logger="cpplan"):
            tr = run(
                cls,
                path,
                tmp_path / cls.__module__,
                rollout=trl_setup.rollout,
                peft_config=config,
                optim="sgd",
            )
        runs[cls] = losses(tr), parameters(tr)
    start = tr.initial_parameters
    (stock_losses, stock), (ours_losses, ours) = runs[trl.GRPOTrainer], runs[GRPOTrainer]
    assert any("PROMPT_TUNING prepends 4 virtual tokens" in r.getMessage() for r in caplog.records)
    assert len(ours_losses) == 1 and ours_losses == pytest.approx(stock_losses, rel=1e-9)
    (name,) = [n for n in stock if "prompt_encoder" in n]
    assert float((ours[name] - stock[name]).abs().max()) < 1e-9
    assert float((stock[name] - start[name]).abs().max()) > 1e-6


def test_no_card_named_derives_one_from_the_models_config(tmp_path, caplog):
    """A small Qwen3 of the user's own, no card named, 1 GiB per wave: the trainer logs the card it
    derived from ``model.config`` (its hidden size, layers and the family's floors), the card prices the
    step's waves in MiB, and the step trains as stock TRL's (loss 1e-9 relative) with fewer tokens; the
    Qwen3.6-35B-A3B card the user had to name before refuses the same budget."""
    path = trl_setup.saved_model("qwen3", tmp_path / "model", torch.float64)
    settings = {"memory_bytes": "1GiB", "solver": "deterministic"}
    with caplog.at_level(logging.WARNING, logger="cpplan"):
        ours = run(GRPOTrainer, path, tmp_path / "ours", rollout=trl_setup.rollout, cpplan=settings)
    stock = run(trl.GRPOTrainer, path, tmp_path / "stock", rollout=trl_setup.rollout)
    (message,) = [r.getMessage() for r in caplog.records if "no card named" in r.getMessage()]
    assert "derived one from model.config (hidden 32, 2 layers" in message and "qwen3-8b" in message
    assert ours.cpplan_planner.card.name == "qwen3-32h-2l-from-config"
    assert losses(ours) == pytest.approx(losses(stock), rel=1e-9)
    assert ours.cpplan_tokens.packed < ours.cpplan_tokens.padded
    workload = cpplan.Workload(
        items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=[t % 64 for t in range(216)]),)),)
    )
    peak = ours.cpplan_planner.plan(workload).to_dict()["waves"][0]["ranks"][0]["peak_bytes"]
    assert peak < 2**29
    named = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes="1GiB", solver="deterministic")
    with pytest.raises(InputError, match="below the static floor"):
        named.plan(workload)


def test_an_unknown_card_blames_the_card_argument():
    """`GRPOTrainer(card="nope", ...)` is refused naming the trainer's own argument, `card`, not the
    planner's `model`, before TRL builds anything."""
    with pytest.raises(InputError, match=r"^field 'card': unknown model 'nope'"):
        GRPOTrainer(card="nope", memory_bytes="8GiB")
