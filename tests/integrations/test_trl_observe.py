"""The loop closed in cpplan's TRL trainer: every wave of a pass with gradients is measured (forward and
backward) and handed to ``Planner.observe``; the learned correction appears in TRL's logs. On the CPU the
measurement is injected (a meter the test gives); on CUDA the trainer makes its own (torch.cuda peaks)."""

from __future__ import annotations

import os
import time

import pytest
import torch

pytest.importorskip("trl", reason="the trl extra is not installed")
pytest.importorskip("datasets", reason="TRL's datasets dependency is not installed")

from cpplan.integrations.trl import GRPOTrainer
from tests.integrations import trl_setup
from tests.support.hf_models import one_thread  # noqa: F401

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
MEMORY_BYTES = int(5.6 * 2**30)
"""A budget under which the Qwen3.6 card splits each pass into 2 to 4 waves (the recomputed path)."""
PEAK_BYTES = 3 * 2**30
"""What the injected meter reports for every segment: about half of what the card predicts per wave."""


class FakeMeter:
    """A :class:`~cpplan.integrations.wave_meter.WaveMeter` reporting ``PEAK_BYTES`` and the segment's
    real seconds; it counts the segments and checks they never overlap."""

    def __init__(self) -> None:
        self.segments = 0
        self._started_s: float | None = None

    def start(self) -> None:
        assert self._started_s is None, "a segment started inside another"
        self._started_s = time.perf_counter()

    def stop(self) -> tuple[int, float]:
        assert self._started_s is not None, "stop without start"
        seconds, self._started_s = time.perf_counter() - self._started_s, None
        self.segments += 1
        return PEAK_BYTES, seconds


def trainer(path, outdir, **cpplan):
    """cpplan's trainer on the shared set-up (float32), the Qwen3.6 card at ``MEMORY_BYTES``."""
    settings = {"card": "qwen3.6-35b-a3b", "memory_bytes": MEMORY_BYTES, "solver": "deterministic"}
    args = trl_setup.config(outdir, model_init_kwargs={"dtype": torch.float32}, max_steps=2)
    return trl_setup.make_trainer(GRPOTrainer, path, args, **(settings | cpplan))


def test_measured_waves_teach_the_planner_and_reach_the_logs(tmp_path):
    """With an injected meter, two GRPO steps hand every wave of the policy passes (each recomputed:
    several waves; one pass of one wave) to the planner, a memory and a time value each; the planner's
    memory correction moves off the identity (below 1: the meter reports less than the card predicts;
    the CPU's seconds, far above the H200 card's, are rejected until enough steps agree) and the logged
    ``cpplan/memory_scale`` and ``cpplan/time_scale`` are the planner's. Passes without gradients (old
    policy, reference) are not measured; with ``observe=False`` nothing is, and nothing is logged."""
    path = trl_setup.saved_model("qwen3", tmp_path / "model", torch.float32)
    meter = FakeMeter()
    tr = trainer(path, tmp_path / "on", meter=meter)
    assert tr.cpplan_planner.correction.is_identity
    tr.train()
    verdicts = tr.cpplan_verdicts
    waves = [v for v in verdicts if v.kind == "memory"]
    assert len(waves) == len([v for v in verdicts if v.kind == "time"]) >= 3
    assert len({v.wave for v in waves}) >= 2  # the passes ran several waves, each measured
    per_step = [sum(v.step == step for v in waves) for step in sorted({v.step for v in waves})]
    # a recomputed wave is two segments (its first forward, then its rerun with its backward); a pass of
    # one wave, not recomputed, is one (its forward to the end of its backward)
    assert meter.segments == sum(2 * n if n > 1 else 1 for n in per_step)
    assert all(v.observed == PEAK_BYTES for v in waves)
    correction = tr.cpplan_planner.correction
    assert correction.memory_scale < 1 and correction.memory_observations == len(waves)
    logged = [log for log in tr.state.log_history if "cpplan/memory_scale" in log]
    assert logged and logged[-1]["cpplan/memory_scale"] == correction.memory_scale
    assert logged[-1]["cpplan/time_scale"] == correction.time_scale

    off = trainer(path, tmp_path / "off", meter=FakeMeter(), observe=False)
    off.train()
    assert off.cpplan_meter.segments == 0 and not off.cpplan_verdicts
    assert off.cpplan_planner.correction.is_identity
    assert not any("cpplan/memory_scale" in log for log in off.state.log_history)
