"""The measurement harness: planned waves run on a real (tiny, random) transformers model, peaks above the
pre-wave baseline per rank and phase, written as logs that ``cpplan calibrate`` and ``Planner.load`` read.
On the CPU the memory source is a fake; ``test_cuda_measurement`` runs on a GPU when there is one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cpplan import InputError, Planner
from cpplan.calibration.measure import (
    CudaMemory,
    build_model,
    clear_gradients,
    hf_run_wave,
    measure_plan,
    write_logs,
)
from cpplan.cli import main
from tests.support.hf_models import mixed_workload, one_thread, plan, tiny_model  # noqa: F401

DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = "qwen3.6-35b-a3b"


class TruthMemory:
    """A fake allocator: a fixed baseline, and a peak of ``k`` x the card's own prediction for the wave
    and rank being run (a simulated truth), read from the plan."""

    def __init__(self, plan_data: dict, k: float, rank: int = 0) -> None:
        self.peaks = [round(k * w["ranks"][rank]["card_peak_bytes"]) for w in plan_data["waves"]]
        self.baseline = 5 * 10**9
        self.runs: list[int] = []

    def synchronize(self) -> None:
        """Nothing is queued."""

    def reset_peak(self) -> None:
        """A new run starts."""
        self.runs.append(len(self.runs))

    def allocated(self) -> int:
        """The baseline."""
        return self.baseline

    def peak(self) -> int:
        """The baseline plus the simulated truth of the wave in flight."""
        return self.baseline + self.peaks[self.wave]


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> Path:
    """A tiny Qwen3.5-MoE config as a transformers config.json."""
    path = tmp_path_factory.mktemp("config") / "config.json"
    tiny_model("qwen3_5_moe").config.to_json_file(path)
    return path


def _measured(tiny_config: Path, k: float, repeats: int = 2):
    workload = mixed_workload(0, scale=0.25)
    data = plan(workload, 1).to_dict()
    model = build_model(tiny_config, num_layers=4, dtype="float32", device="cpu", lora_rank=4)
    memory = TruthMemory(data, k)
    run = hf_run_wave(model, data, workload, kernels="torch")

    def tracked(wave: int) -> None:
        memory.wave = wave
        run(wave)

    measured = measure_plan(tracked, data, memory=memory, repeats=repeats, clear=clear_gradients(model))
    return data, measured, model


def test_measured_logs_teach_a_planner_and_calibrate(tiny_config, tmp_path, capsys):
    """A plan's wave run on a tiny LoRA model (the real cpplan.hf forward and backward, a fake allocator
    reporting 0.9 x the card) is written as cold and warm logs above the pre-wave baseline; the cold log
    loads as a planner that learned 0.9 x 1.03, and `cpplan calibrate` fits a card to it with the
    reference CSV."""
    data, measured, model = _measured(tiny_config, 0.9)
    assert [m.phase for m in measured] == ["cold", "warm"]
    expected = round(0.9 * data["waves"][0]["ranks"][0]["card_peak_bytes"])
    assert all(m.peak_bytes == expected and m.baseline_bytes == 5 * 10**9 for m in measured)
    assert any(p.grad is not None for n, p in model.named_parameters() if "lora" in n)
    cold, warm = write_logs(measured, data, tmp_path / "measured")
    assert (cold.name, warm.name) == ("measured.cold.jsonl", "measured.warm.jsonl")
    learned = Planner.load(cold)
    assert learned.settings.phase == "cold" and learned.settings.num_layers == data["layers"]
    assert learned.correction.memory_scale == pytest.approx(0.9 * 1.03, rel=1e-5)
    out = tmp_path / "card.toml"
    args = ["calibrate", str(DATA / "measurements.csv"), str(cold), "--model", MODEL, "--output", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "measured.cold.jsonl:2" in text and out.exists()


def test_measure_plan_checks_waves_and_repeats(tiny_config):
    """Unknown waves and a non-positive number of runs are InputErrors naming the field; every run after
    the first of a wave is warm."""
    data = plan(mixed_workload(0, scale=0.25), 1).to_dict()
    memory = TruthMemory(data, 1.0)
    memory.wave = 0
    with pytest.raises(InputError) as info:
        measure_plan(lambda w: None, data, memory=memory, waves=[3])
    assert info.value.field == "waves"
    with pytest.raises(InputError) as info:
        measure_plan(lambda w: None, data, memory=memory, repeats=0)
    assert info.value.field == "repeats"
    phases = [m.phase for m in measure_plan(lambda w: None, data, memory=memory, repeats=3)]
    assert phases == ["cold", "warm", "warm"]


def test_build_model_truncates_and_refuses_a_bad_config(tiny_config, tmp_path):
    """The model is built from the config with the requested depth (its layer pattern truncated); a
    config that is not JSON names the file and the field."""
    model = build_model(tiny_config, num_layers=2, dtype="float32", device="cpu", lora_rank=0)
    assert model.config.num_hidden_layers == 2 and len(model.config.layer_types) == 2
    bad = tmp_path / "config.json"
    bad.write_text("{nope")
    with pytest.raises(InputError) as info:
        build_model(bad, num_layers=2, device="cpu")
    assert info.value.field == "hf_config" and str(bad) in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_measure_cli_without_cuda_is_refused(tmp_path, tiny_config, capsys):
    """Without a CUDA device `cpplan measure` exits 2 naming the device, no traceback."""
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan(mixed_workload(0, scale=0.25), 1).to_dict()))
    args = ["measure", str(plan_path), str(tmp_path / "w.jsonl"), "--hf-config", str(tiny_config)]
    code = main([*args, "--output", str(tmp_path / "m")])
    assert code == 2
    err = capsys.readouterr().err
    assert "CUDA" in err and "Traceback" not in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_measurement(tiny_config, tmp_path):
    """On a GPU, torch.cuda.max_memory_allocated above the pre-wave baseline of a bf16 LoRA wave of a
    tiny model is positive and under 1 GB, cold and warm, and the written log loads as a planner."""
    workload = mixed_workload(0, scale=0.25)
    data = plan(workload, 1).to_dict()
    model = build_model(tiny_config, num_layers=4, dtype="bfloat16", device="cuda", lora_rank=4)
    run = hf_run_wave(model, data, workload, kernels="torch")
    measured = measure_plan(run, data, memory=CudaMemory("cuda"), clear=clear_gradients(model))
    assert all(0 < m.peak_bytes < 10**9 and m.seconds > 0 for m in measured)
    paths = write_logs(measured, data, tmp_path / "gpu")
    assert Planner.load(paths[0]).learning.observations
