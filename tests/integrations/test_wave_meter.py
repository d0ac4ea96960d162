"""Metered waves (cpplan.integrations.wave_meter): each planned wave of a pass with gradients is measured
once, from its forward to the end of its own backward, without changing any gradient."""

from __future__ import annotations

import torch

import cpplan
from cpplan.integrations.packed_step import step_logprobs
from cpplan.integrations.rollout_items import grouped_workload
from tests.integrations.test_packed_step import rows
from tests.support.hf_models import gradients, max_abs_diff, one_thread, tiny_model  # noqa: F401


class WatchingMeter:
    """A meter that, at each ``stop``, notes whether the model's first-layer weight has a gradient yet
    (the wave's backward reached the bottom of the model), and reports a fixed peak."""

    def __init__(self, model) -> None:
        self.weight = model.model.layers[0].mlp.up_proj.weight
        self.stops: list[bool] = []

    def start(self) -> None:
        pass

    def stop(self) -> tuple[int, float]:
        self.stops.append(self.weight.grad is not None)
        return 1000, 0.5


def loss_of(logprobs: dict) -> torch.Tensor:
    """A weighted sum touching every request's log-probs."""
    return sum((k + 1) * lp.sum() for k, (_, lp) in enumerate(sorted(logprobs.items())))


def test_recomputed_waves_are_measured_to_the_end_of_their_backward():
    """A plan of several waves (6 GiB for the 35B card), every wave recomputed: each wave is recorded
    once, after its backward, as the larger of its two segments' peaks and the sum of their seconds;
    each first-forward segment ends before any gradient exists and the first backward segment after the
    bottom layer has one; the gradients equal the unmetered pass's exactly."""
    model = tiny_model("qwen3", layers=2)
    workload, _ = grouped_workload(rows(0))
    result = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes="6GiB", solver="deterministic").plan(
        workload
    )
    waves = result.plan.num_waves
    assert waves > 1
    meter, recorded = WatchingMeter(model), []
    packed, _ = step_logprobs(model, result, workload, kernels="torch", meter=meter, record=recorded.append)
    assert meter.stops == [False] * waves and not recorded  # the forwards; nothing recorded before backward
    grads = gradients(model, loss_of(packed))
    assert meter.stops[waves:] == [True] * waves
    assert sorted(m.wave for m in recorded) == list(range(waves))
    assert all(m.peak_bytes == 1000 and m.seconds == 1.0 for m in recorded)
    plain, _ = step_logprobs(model, result, workload, kernels="torch")
    assert max_abs_diff(grads, gradients(model, loss_of(plain))) == 0


def test_one_wave_with_a_frozen_embedding_is_measured_through_its_backward():
    """A plan of one wave (not recomputed) on a model whose embedding is frozen (as under LoRA): one
    segment, from the forward to the end of the backward (recorded then, the bottom layer's gradient
    formed); no pass without gradients is measured."""
    model = tiny_model("qwen3", layers=2)
    model.model.embed_tokens.weight.requires_grad_(False)
    workload, _ = grouped_workload(rows(0)[:3])
    result = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes="40GiB", solver="deterministic").plan(
        workload
    )
    assert result.plan.num_waves == 1
    meter, recorded = WatchingMeter(model), []
    packed, _ = step_logprobs(model, result, workload, kernels="torch", meter=meter, record=recorded.append)
    assert meter.stops == [] and not recorded
    gradients(model, loss_of(packed))
    assert meter.stops == [True] and [(m.wave, m.seconds) for m in recorded] == [(0, 0.5)]
    with torch.no_grad():
        step_logprobs(model, result, workload, kernels="torch", meter=meter, record=recorded.append)
    assert meter.stops == [True] and len(recorded) == 1
