"""cpplan's verl engine against verl's stock FSDPEngineWithLMHead on the same RL batch (stock padded for
the hybrid Qwen3.5, whose full-attention layer stock padding-free does not run exactly on the CPU), on
the CPU in float64: the same log-probs and entropies where verl's losses read them, the same PPO loss
and the same gradients, while each planned wave runs tree-packed (a prompt stored once for its group's
responses). What had to be patched for verl's engines to be built on a CPU: tests/support/verl_cpu.py."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("verl", reason="the verl extra is not installed")
pytest.importorskip("tensordict", reason="the verl extra is not installed")

import cpplan
import cpplan.hf
from tests.support import verl_cpu

CARD = "qwen3.6-35b-a3b"
TOL = 1e-9


@pytest.fixture(scope="module")
def verl_on_cpu():
    """One gloo process group of one rank, verl patched for the CPU (tests/support/verl_cpu.py)."""
    import torch.distributed as dist

    from tests.support.hf_spawn import free_port

    torch.set_num_threads(1)
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    with verl_cpu.cpu_verl():
        yield
    if started:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny dense Qwen3 and hybrid Qwen3.5 (a GDN layer, then a full-attention layer) saved for verl,
    by family."""
    return {
        family: verl_cpu.saved_model(family, tmp_path_factory.mktemp(family))
        for family in ("qwen3", "qwen3_5")
    }


def planner(memory_bytes: int = verl_cpu.MEMORY_3_WAVES) -> cpplan.Planner:
    """The deterministic planner for the Qwen3.6-35B-A3B card (3 waves for the test batch)."""
    return cpplan.Planner(model=CARD, memory_bytes=memory_bytes, solver="deterministic")


def train_pass(engine, data) -> dict:
    """One training pass (``forward_backward_batch`` under verl's train mode, float64 internals): the
    summed micro-batch losses, the number of micro-batches and every parameter's full gradient."""
    loss_fn = verl_cpu.ppo_loss(len(data))
    with cpplan.hf.float64_internals(), engine.train_mode():
        engine.optimizer_zero_grad()
        out = engine.forward_backward_batch(data, loss_fn)
        grads = {name: p.grad.full_tensor().clone() for name, p in engine.module.named_parameters()}
    return {"loss": sum(out["loss"]), "micro_batches": len(out["loss"]), "grads": grads}


def infer_pass(engine, data) -> dict:
    """One forward-only pass (verl's ``infer_batch`` under eval mode): the response log-probs and
    entropies as verl's trainer reads them (``no_padding_2_padding``: ``[B, R]``)."""
    from verl.workers.utils.padding import no_padding_2_padding

    with cpplan.hf.float64_internals(), engine.eval_mode():
        out = engine.infer_batch(data)
    found = out["model_output"]
    return {key: no_padding_2_padding(found[key], data) for key in ("log_probs", "entropy")}


def max_rel_grad_diff(a: dict, b: dict) -> float:
    """The largest gradient difference over all parameters, relative to each parameter's largest
    entry."""
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp(min=1e-300)) for k in a)


@pytest.mark.parametrize(
    ("family", "remove_padding", "reference_padding_free"),
    [("qwen3", True, True), ("qwen3_5", False, False), ("qwen3_5", True, False)],
    ids=["qwen3-rmpad", "qwen3_5-padded", "qwen3_5-rmpad"],
)
def test_equals_the_stock_engine(verl_on_cpu, models, family, remove_padding, reference_padding_free):
    """On one batch (3 prompts x 4 responses, temperature 0.7): the cpplan engine's 3 tree-packed
    waves give the stock engine's PPO + entropy loss (1e-9 relative), gradients (1e-9 relative per
    parameter) and, in a forward-only pass, its response log-probs and entropies (1e-9), with 217
    packed tokens where verl runs 517. The reference is the stock engine padding-free for Qwen3 and
    padded for Qwen3.5, whose full-attention layer stock padding-free does not run exactly on the CPU
    (:func:`test_stock_padding_free_is_no_reference_for_qwen3_5`); the cpplan engine runs the plan's
    waves whatever ``use_remove_padding`` says."""
    from verl.workers.engine import FSDPEngineWithLMHead

    from cpplan.integrations.verl import CpplanFSDPEngine

    path = models[family]
    stock = verl_cpu.engine(FSDPEngineWithLMHead, path, remove_padding=reference_padding_free)
    ours = verl_cpu.engine(CpplanFSDPEngine, path, remove_padding=remove_padding, planner=planner())
    reference = lambda: verl_cpu.ppo_batch(remove_padding=reference_padding_free)  # noqa: E731
    batch = lambda: verl_cpu.ppo_batch(remove_padding=remove_padding)  # noqa: E731
    a, b = train_pass(stock, reference()), train_pass(ours, batch())
    assert abs(a["loss"] - b["loss"]) <= TOL * abs(a["loss"])
    assert max_rel_grad_diff(a["grads"], b["grads"]) <= TOL
    assert b["micro_batches"] == ours.cpplan_result.plan.num_waves == 3
    tokens = ours.cpplan_tokens
    assert (tokens.unpacked, tokens.packed) == (517, 217)
    assert tokens.packed == ours.cpplan_result.plan.packed_tokens
    x, y = infer_pass(stock, reference()), infer_pass(ours, batch())
    for key in ("log_probs", "entropy"):
        assert float((x[key] - y[key]).abs().max()) <= TOL, key


def test_stock_padding_free_is_no_reference_for_qwen3_5(verl_on_cpu, models):
    """Why Qwen3.5 is compared with stock padded: its test model has a full-attention layer after its
    GDN layer, and verl's stock padding-free engine on the CPU gives that model's log-probs exactly
    (1e-12 against stock padded) only for the first sample of each of its micro-batches; every other
    sample is off by more than 1e-5 (measured up to 1.8e-3 in log-probs)."""
    import json

    from verl.workers.engine import FSDPEngineWithLMHead
    from verl.workers.engine.utils import prepare_micro_batches

    with open(os.path.join(models["qwen3_5"], "config.json")) as config:
        assert json.load(config)["layer_types"] == ["linear_attention", "full_attention"]
    found = {}
    for padding_free in (True, False):
        stock = verl_cpu.engine(FSDPEngineWithLMHead, models["qwen3_5"], remove_padding=padding_free)
        found[padding_free] = infer_pass(stock, verl_cpu.ppo_batch(remove_padding=padding_free))["log_probs"]
    per_sample = (found[True] - found[False]).abs().amax(1)
    print(f"stock padding-free vs stock padded, per-sample max |log-prob diff|: {per_sample.tolist()}")
    _, micro_batches = prepare_micro_batches(verl_cpu.ppo_batch())
    firsts = {indices[0] for indices in micro_batches}
    assert all(float(per_sample[i]) <= 1e-12 for i in firsts)
    assert all(float(per_sample[i]) > 1e-5 for i in range(len(per_sample)) if i not in firsts)


def sft_batch():
    """The test batch as an SFT batch (what verl's SFT trainer gives an engine): no ``prompts`` or
    ``responses``, a jagged full-length ``loss_mask`` that is 1 on the response tokens."""
    data = verl_cpu.ppo_batch()
    lengths = data["input_ids"].offsets().diff().tolist()
    prompt_lens = data["attention_mask"][:, : data["prompts"].shape[1]].sum(1).tolist()
    masks = [
        torch.cat([torch.zeros(p, dtype=torch.long), torch.ones(n - p, dtype=torch.long)])
        for p, n in zip(prompt_lens, lengths, strict=True)
    ]
    data["loss_mask"] = torch.nested.as_nested_tensor(masks, layout=torch.jagged)
    for key in ("prompts", "responses", "old_log_probs", "advantages", "response_mask", "attention_mask"):
        del data[key]
    return data


def test_a_batch_it_does_not_cover_runs_the_stock_path(verl_on_cpu, models):
    """A batch the cpplan path does not cover (an SFT batch: no prompts and responses) runs verl's own
    method: no plan is made, and the SFT loss and gradients are the stock engine's."""
    import functools

    from verl.workers.engine import FSDPEngineWithLMHead
    from verl.workers.utils.losses import sft_loss

    from cpplan.integrations.verl import CpplanFSDPEngine

    loss_fn = functools.partial(sft_loss, config=None)  # verl's SFT loss reads no config
    stock = verl_cpu.engine(FSDPEngineWithLMHead, models["qwen3"])
    ours = verl_cpu.engine(CpplanFSDPEngine, models["qwen3"], planner=planner())
    assert ours.stock_reason(sft_batch()) == "not an RL batch"
    results = []
    for engine in (stock, ours):
        with cpplan.hf.float64_internals(), engine.train_mode():
            engine.optimizer_zero_grad()
            out = engine.forward_backward_batch(sft_batch(), loss_fn)
            grads = {n: p.grad.full_tensor().clone() for n, p in engine.module.named_parameters()}
        results.append((sum(out["loss"]), grads))
    assert ours.cpplan_result is None and ours.cpplan_tokens is None
    assert results[0][0] == results[1][0] and max_rel_grad_diff(results[0][1], results[1][1]) == 0.0


def test_empty_responses_and_a_single_wave(verl_on_cpu, models):
    """Two responses without a token (verl keeps them; nothing to score) and a budget that fits the
    step in one wave: the log-probs, loss and gradients still equal the stock engine's, and the
    empty responses' log-probs are empty rows."""
    from verl.workers.engine import FSDPEngineWithLMHead

    from cpplan.integrations.verl import CpplanFSDPEngine

    stock = verl_cpu.engine(FSDPEngineWithLMHead, models["qwen3"])
    ours = verl_cpu.engine(CpplanFSDPEngine, models["qwen3"], planner=planner(40 * 2**30))
    batch = lambda: verl_cpu.ppo_batch(empty_responses=2)  # noqa: E731
    a, b = train_pass(stock, batch()), train_pass(ours, batch())
    assert ours.cpplan_result.plan.num_waves == 1 and b["micro_batches"] == 1
    assert abs(a["loss"] - b["loss"]) <= TOL * abs(a["loss"])
    assert max_rel_grad_diff(a["grads"], b["grads"]) <= TOL
    x, y = infer_pass(stock, batch()), infer_pass(ours, batch())
    assert float((x["log_probs"] - y["log_probs"]).abs().max()) <= TOL
    assert float(y["log_probs"][2:4].abs().max()) == 0.0


def test_observed_waves_change_the_correction(verl_on_cpu, models):
    """With a memory source (a fake reading 0.8x each wave's card peak) every training wave is
    observed: the planner's memory correction drops below 1 and later plans price the learned scale; a
    forward-only pass observes nothing, and with ``cpplan_observe`` off a training pass neither."""
    from cpplan.calibration.measure import FakeMemory
    from cpplan.integrations.verl import CpplanFSDPEngine

    class CardScaled(FakeMemory):
        """Reads 0.8x the planned card peak of the wave in flight (the engine's last plan)."""

        def __init__(self):
            super().__init__()
            self.wave = 0

        def reset_peak(self):
            plan = ours.cpplan_result.to_dict()
            self.above_bytes = int(0.8 * plan["waves"][self.wave]["ranks"][0]["card_peak_bytes"])
            self.wave += 1

    memory = CardScaled()
    ours = verl_cpu.engine(CpplanFSDPEngine, models["qwen3"], planner=planner(), memory=memory)
    infer_pass(ours, verl_cpu.ppo_batch())
    assert len(ours.cpplan_planner.learning.observations) == 0
    ours.cpplan_observe = False
    train_pass(ours, verl_cpu.ppo_batch())
    assert len(ours.cpplan_planner.learning.observations) == 0 and memory.wave == 0
    ours.cpplan_observe = True
    train_pass(ours, verl_cpu.ppo_batch())
    assert memory.wave == 3 and len(ours.cpplan_planner.learning.observations) == 3
    scale = ours.cpplan_planner.correction.memory_scale
    assert scale < 0.9
    later = ours.cpplan_planner.plan(verl_workload()).to_dict()
    rank = later["waves"][0]["ranks"][0]
    assert rank["peak_bytes"] == pytest.approx(scale * rank["card_peak_bytes"], rel=1e-9)


def verl_workload() -> cpplan.Workload:
    """The test batch as the cpplan engine plans it."""
    from cpplan.integrations.verl.rollout_batch import rollout_step

    return rollout_step(verl_cpu.ppo_batch()).workload


@pytest.mark.slow
def test_registered_by_model_type_and_entry_point(verl_on_cpu):
    """verl's registry returns the cpplan engine for ``model_type=cpplan_language_model`` (fsdp2, on
    this device), the installed package declares it in verl's ``verl.plugins`` entry-point group, and a
    fresh interpreter that only imports verl finds it registered (verl loads the plugin)."""
    from verl.workers.engine import EngineRegistry

    from cpplan.integrations.verl import MODEL_TYPE, CpplanFSDPEngine

    assert EngineRegistry.get_engine_cls(MODEL_TYPE, "fsdp2") is CpplanFSDPEngine
    points = importlib.metadata.entry_points(group="verl.plugins")
    assert [p.value for p in points if p.name == "cpplan"] == ["cpplan.integrations.verl.engine"]
    probe = (
        "import verl\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        f"print(sorted(EngineRegistry._engines[{MODEL_TYPE!r}]))\n"
    )
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="auto")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['fsdp', 'fsdp2']"


@pytest.fixture
def unconfigured(monkeypatch):
    """No planner configured in this process and no cpplan environment variables."""
    from cpplan.integrations.verl import engine

    monkeypatch.setattr(engine._Configured, "planner", None)
    monkeypatch.setattr(engine._Configured, "settings", None)
    monkeypatch.setattr(engine._Configured, "derived", {})
    for name in ("CPPLAN_CARD", "CPPLAN_MEMORY", "CPPLAN_TOPOLOGY", "CPPLAN_SOLVER"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def engine_configs(path: str) -> dict:
    """verl's configs for an engine over the model at ``path`` (verl's defaults otherwise)."""
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPOptimizerConfig, HFModelConfig

    return dict(
        model_config=HFModelConfig(path=path, override_config={"attn_implementation": "eager"}),
        optimizer_config=FSDPOptimizerConfig(lr=1e-2, total_training_steps=1),
        checkpoint_config=CheckpointConfig(),
    )


def test_settings_are_checked(verl_on_cpu, models, unconfigured):
    """The engine refuses FSDP1 (it runs on FSDP2) and, without a planner or a memory budget (no
    configure_engine, no CPPLAN_MEMORY), names what to set; with CPPLAN_CARD and CPPLAN_MEMORY it makes
    a planner for that card."""
    from verl.workers.config import FSDPEngineConfig

    from cpplan.integrations.verl import CpplanFSDPEngine

    configs = engine_configs(models["qwen3"])
    with pytest.raises(ValueError, match="fsdp2"):
        CpplanFSDPEngine(engine_config=FSDPEngineConfig(strategy="fsdp"), **configs)
    with pytest.raises(cpplan.InputError, match="CPPLAN_MEMORY"):
        CpplanFSDPEngine(engine_config=FSDPEngineConfig(strategy="fsdp2"), **configs)
    unconfigured.setenv("CPPLAN_CARD", CARD)
    unconfigured.setenv("CPPLAN_MEMORY", "40GiB")
    unconfigured.setenv("CPPLAN_SOLVER", "deterministic")
    made = CpplanFSDPEngine(engine_config=FSDPEngineConfig(strategy="fsdp2"), **configs)
    assert made.cpplan_planner.profile.name == "deterministic"
    assert made.cpplan_planner.settings.memory_bytes == 40 * 2**30
    assert made.cpplan_planner.settings.model.name == CARD


def test_a_card_is_derived_from_the_config_when_none_is_named(verl_on_cpu, models, unconfigured, caplog):
    """With a memory budget but no card (CPPLAN_MEMORY alone, or configure_engine without ``card``) the
    engine derives the card from the model's config, as the TRL trainer does: the tiny Qwen3.5's
    geometry (hidden 32, one GDN and one attention layer) at the 8 bytes per element of float64 mixed
    precision, logged once for the two engines of the process (which share its planner); it plans the
    step and runs it, equal to the stock engine (loss and gradients 1e-9). The derived card's
    segment price is calibrated by size, so the plan stores each prompt once, and the
    engine's note on unshared plans stays silent.)"""
    import logging

    from verl.workers.engine import FSDPEngineWithLMHead

    from cpplan.integrations.verl import CpplanFSDPEngine, configure_engine

    unconfigured.setenv("CPPLAN_MEMORY", "1GiB")
    unconfigured.setenv("CPPLAN_SOLVER", "deterministic")
    path = models["qwen3_5"]
    with caplog.at_level(logging.WARNING, logger="cpplan.integrations.verl.engine"):
        ours = verl_cpu.engine(CpplanFSDPEngine, path, remove_padding=False)
        again = verl_cpu.engine(CpplanFSDPEngine, path, remove_padding=False)
    derived = [r.getMessage() for r in caplog.records if "derived one from model.config" in r.getMessage()]
    assert len(derived) == 1 and "hidden 32, 2 layers (1 GDN, 1 attention)" in derived[0], derived
    card = ours.cpplan_planner.settings.model
    assert again.cpplan_planner is ours.cpplan_planner
    assert card.name.endswith("-from-config") and card.name != CARD
    assert (card.geometry.hidden, card.geometry.num_layers, card.geometry.dtype_bytes) == (32, 2, 8)
    assert tuple(card.geometry.layer_pattern) == ("gdn", "attention")
    stock = verl_cpu.engine(FSDPEngineWithLMHead, path, remove_padding=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cpplan.integrations.verl.engine"):
        a = train_pass(stock, verl_cpu.ppo_batch(remove_padding=False))
        b = train_pass(ours, verl_cpu.ppo_batch())
        train_pass(ours, verl_cpu.ppo_batch())
    notes = [r.getMessage() for r in caplog.records if "once per completion" in r.getMessage()]
    plan = ours.cpplan_result.plan
    assert plan.packed_tokens < plan.logical_tokens and not notes, (plan.packed_tokens, notes)
    assert ours.cpplan_result.plan.num_waves >= 1
    assert ours.cpplan_tokens.packed == ours.cpplan_result.plan.packed_tokens
    assert abs(a["loss"] - b["loss"]) <= TOL * abs(a["loss"])
    assert max_rel_grad_diff(a["grads"], b["grads"]) <= TOL
    assert configure_engine(memory_bytes="2GiB", solver="deterministic") is None
    by_call = verl_cpu.engine(CpplanFSDPEngine, path)
    assert by_call.cpplan_planner.settings.model.name == card.name
    assert by_call.cpplan_planner.settings.memory_bytes == 2 * 2**30


def test_a_named_card_wins_over_the_derived_one(verl_on_cpu, models, unconfigured):
    """A card named by configure_engine, or by CPPLAN_CARD, is the card the engine plans with, not one
    derived from the model config."""
    from cpplan.integrations.verl import CpplanFSDPEngine, configure_engine

    unconfigured.setenv("CPPLAN_MEMORY", "1GiB")
    unconfigured.setenv("CPPLAN_CARD", "qwen3-8b")
    by_env = verl_cpu.engine(CpplanFSDPEngine, models["qwen3_5"])
    assert by_env.cpplan_planner.settings.model.name == "qwen3-8b"
    configured = configure_engine(card=CARD, memory_bytes="40GiB", solver="deterministic")
    by_call = verl_cpu.engine(CpplanFSDPEngine, models["qwen3_5"])
    assert by_call.cpplan_planner is configured and configured.settings.model.name == CARD


def test_a_config_no_card_prices_names_what_to_set(unconfigured):
    """A model config no derived card prices (a layer type that is neither attention nor linear
    attention) is an InputError that says why and names CPPLAN_CARD and configure_engine(card=...)."""
    from types import SimpleNamespace

    from cpplan.gpu_check.tiny_models import tiny_config
    from cpplan.integrations.verl import configure_engine, engine

    fields = tiny_config("qwen3").to_dict() | {"layer_types": ["mamba"] * 4}
    configure_engine(memory_bytes="1GiB")
    with pytest.raises(cpplan.InputError) as info:
        engine.configured_planner(SimpleNamespace(**fields), dtype_bytes=2)
    message = str(info.value)
    assert "'mamba'" in message and "CPPLAN_CARD" in message and "configure_engine(card=" in message
    assert info.value.field == "card"


def test_the_update_pass_takes_the_plan_made_during_the_forward_only_pass(verl_on_cpu, models):
    """After a forward-only pass, the training pass over the same samples takes the plan the engine
    started ahead (planned once, not again) and still gives the stock engine's loss and gradients."""
    from verl.workers.engine import FSDPEngineWithLMHead

    from cpplan.integrations.verl import CpplanFSDPEngine

    path = models["qwen3"]
    stock = verl_cpu.engine(FSDPEngineWithLMHead, path, remove_padding=True)
    ours = verl_cpu.engine(CpplanFSDPEngine, path, remove_padding=True, planner=planner())
    batch = lambda: verl_cpu.ppo_batch(remove_padding=True)  # noqa: E731
    infer_pass(ours, batch())
    assert ours.cpplan_ahead.num_taken == 0
    a, b = train_pass(stock, batch()), train_pass(ours, batch())
    assert ours.cpplan_ahead.num_taken == 1
    assert ours.cpplan_ahead.num_planned_now == 1  # the forward-only pass itself
    assert abs(a["loss"] - b["loss"]) <= TOL * abs(a["loss"])
    assert max_rel_grad_diff(a["grads"], b["grads"]) <= TOL
