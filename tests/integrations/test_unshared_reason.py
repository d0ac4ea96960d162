"""Why a trainer's plan shares no repeated prompt (cpplan.integrations.unshared_reason), and the TRL
trainer's warning of it: logged once, naming the planner's prices shared and unshared, and not logged
when the plan shares."""

from __future__ import annotations

import logging
import re

import pytest

import cpplan
from cpplan.integrations.unshared_reason import UnsharedNote, unshared_reason
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import best_wave
from cpplan.spec.config_card import card_from_config
from tests.support.grouped_rollouts import grouped_rollouts

transformers = pytest.importorskip("transformers")


def howto_planner() -> cpplan.Planner:
    """A planner of the card derived from the TRL how-to's tiny Qwen3 (float32)."""
    sizes = dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, head_dim=16
    )
    config = transformers.Qwen3Config(vocab_size=63, num_key_value_heads=2, **sizes)
    return cpplan.Planner(
        model=card_from_config(config, dtype_bytes=4), memory_bytes="36GiB", solver="deterministic"
    )


def workload(prompt_length: int, completions: int = 4) -> cpplan.Workload:
    """2 prompts of ``prompt_length`` tokens, each with ``completions`` completions of 20 tokens."""
    return grouped_rollouts(prompt_length, completions)


def test_reason_names_the_planners_prices_with_and_without_sharing():
    """Short prompts on the tiny model (measured slower shared): the plan shares nothing and the reason
    gives the plan's own seconds and the evaluator's price of its waves with every prompt shared, the
    larger; with 64-token prompts the plan shares and there is no reason; nor for unrepeated prompts."""
    planner = howto_planner()
    short = workload(4)
    result = planner.plan(short)
    assert result.plan.packed_tokens == result.plan.logical_tokens
    reason = unshared_reason(planner, result, short)
    problem = Problem.build(short, planner.settings)
    shared = sum(best_wave(problem, w.items, ["full"])[0].cost_s for w in result.plan.waves)
    seconds = [float(x) for x in re.findall(r"at (\d+\.\d+) s, against (\d+\.\d+) s", reason)[0]]
    assert seconds == pytest.approx([shared, result.plan.cost_s], abs=1e-6) and shared > result.plan.cost_s
    assert "name a card" in reason
    long = workload(64)
    assert unshared_reason(planner, planner.plan(long), long) is None
    alone = workload(4, completions=1)
    assert unshared_reason(planner, planner.plan(alone), alone) is None


def test_trainer_warns_once_and_not_when_the_plan_shares(caplog):
    """The trainers' check after each plan (the TRL trainer's and the verl engine's note): an unshared
    plan of repeated prompts logs one warning over two passes; a shared plan logs none."""
    planner = howto_planner()
    for length, expected in ((64, 0), (4, 1)):
        note = UnsharedNote(logging.getLogger("cpplan.integrations.trl.grpo_trainer"))
        wl = workload(length)
        result = planner.plan(wl)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cpplan"):
            for _ in range(2):
                note.check(planner, result, wl)
        messages = [r.getMessage() for r in caplog.records if "once per completion" in r.getMessage()]
        assert len(messages) == expected
        assert all("prices the waves with each prompt stored once" in m for m in messages)
