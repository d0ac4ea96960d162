"""``cpplan gpu-check --dry-run``: every step of the GPU check on the CPU at tiny shapes (the pure-torch
kernels, the fake memory source), its files in the forms ``cpplan calibrate`` reads, a perturbed
log-prob caught by the exactness check, the time guard and the CLI's bad-input codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cpplan.calibration.measurements import read_measurements
from cpplan.cli import main
from cpplan.gpu_check.exactness import TOLERANCES
from cpplan.gpu_check.measured_waves import DRY_SHAPES, FAKE_RATIO
from cpplan.gpu_check.time_guard import RESERVE_S, TimeGuard
from tests.support.hf_models import one_thread  # noqa: F401 (autouse fixture)

ROOT = Path(__file__).resolve().parents[2]
CARD = "qwen3.6-35b-a3b"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One whole dry run as a subprocess, as CI runs it."""
    out = tmp_path_factory.mktemp("gpu_check")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cpplan.cli import run; run()",
            "gpu-check",
            "--dry-run",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    return proc, out


def test_dry_run_passes_every_step(dry_run):
    """The dry run exits 0 and its JSON holds the environment, 12 exactness rows (Qwen3.5-MoE and Qwen3,
    float32 and float64, CP 1, 2 and 4) each comparing auto, torch and alone within the CPU tolerances,
    the three waves cold and warm (fake peaks at 0.9 x the card, measured seconds), and the kernel rows."""
    proc, out = dry_run
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["format"] == "cpplan-gpu-check/1" and report["dry_run"] is True and report["passed"]
    assert report["environment"]["device"]["name"] == "CPU dry run"
    assert report["environment"]["packages"]["torch"] is not None
    rows = report["exactness"]
    assert {(r["family"], r["dtype"], r["cp"]) for r in rows} == {
        (f, d, cp) for f in ("qwen3_5_moe", "qwen3") for d in ("float32", "float64") for cp in (1, 2, 4)
    }
    for r in rows:
        tolerance = TOLERANCES[("cpu", r["dtype"])]
        pairs = [(c["a"], c["b"]) for c in r["comparisons"]]
        assert pairs == [("auto", "torch"), ("auto", "alone"), ("torch", "alone")]
        assert all(c["passed"] and c["logprobs_abs"] <= tolerance.logprobs_abs for c in r["comparisons"])
    waves = report["waves"]
    assert [(w["case"], w["phase"]) for w in waves] == [
        (c, p) for c in ("no_sharing", "grpo_tree", "long_chain") for p in ("cold", "warm")
    ]
    assert all(w["memory_source"] == "fake" and w["measured_s"] > 0 for w in waves)
    assert all(w["peak_ratio"] == pytest.approx(FAKE_RATIO, rel=1e-6) for w in waves)
    tree = next(w for w in waves if w["case"] == "grpo_tree")
    assert tree["logical_tokens"] > tree["packed_tokens"]  # the tree shares its prompts
    kernels = {r["kernel"] for r in report["kernels"]}
    assert kernels == {"gdn", "tree_attention", "causal_attention"}
    tree_rows = [r for r in report["kernels"] if r["kernel"] == "tree_attention"]
    causal_rows = [r for r in report["kernels"] if r["kernel"] == "causal_attention"]
    assert all(t["work"] < c["work"] for t, c in zip(tree_rows, causal_rows, strict=True))
    assert "## Exactness" in (out / "gpu_check.md").read_text()


def test_dry_run_files_are_what_calibrate_reads(dry_run, tmp_path, capsys):
    """measurements.csv holds the unshared wave's cold and warm peaks as calibration rows (its requests
    and tokens), and `cpplan calibrate` fits a card to it together with the six planner-state logs."""
    _, out = dry_run
    rows = read_measurements(out / "measurements.csv")
    assert [r.phase for r in rows] == ["cold", "warm"]
    assert all(r.requests == DRY_SHAPES.unshared_requests for r in rows)
    assert all(
        r.total_tokens == DRY_SHAPES.unshared_tokens and r.layers == DRY_SHAPES.num_layers for r in rows
    )
    report = json.loads((out / "gpu_check.json").read_text())
    measured = {w["phase"]: w["measured_peak_bytes"] for w in report["waves"] if w["case"] == "no_sharing"}
    assert [r.observed_max_bytes for r in rows] == [measured["cold"], measured["warm"]]
    logs = sorted((out / "logs").glob("*.jsonl"))
    assert len(logs) == 6
    card = tmp_path / "card.toml"
    args = [
        "calibrate",
        str(out / "measurements.csv"),
        *map(str, logs),
        "--model",
        CARD,
        "--output",
        str(card),
    ]
    assert main(args) == 0
    assert card.exists() and "no_sharing.cold.jsonl:2" in capsys.readouterr().out


def test_check_exactness_catches_a_perturbation():
    """On one family and CP size, a packed auto log-prob moved by 1e-6 fails the float64 auto
    comparisons and not torch against alone (which the perturbation does not touch)."""
    import cpplan
    from cpplan.gpu_check.exactness import check_exactness, exactness_workload

    workload = exactness_workload(True)
    result = cpplan.plan(
        workload, topology=cpplan.Topology(cp=2), model=CARD, memory_bytes=80 * 2**30, solver="deterministic"
    )
    rows = check_exactness(
        device="cpu",
        workload=workload,
        plans=lambda cp: result,
        perturb_logprob=1e-6,
        families=("qwen3",),
        cp_sizes=(2,),
    )
    by_dtype = {r.dtype: {(c.a, c.b): c.passed for c in r.comparisons} for r in rows}
    assert by_dtype["float64"] == {
        ("auto", "torch"): False,
        ("auto", "alone"): False,
        ("torch", "alone"): True,
    }
    assert by_dtype["float32"][("torch", "alone")]


@pytest.mark.slow
def test_a_perturbed_logprob_fails_the_check(tmp_path, capsys):
    """One packed log-prob moved by 1e-3 (a test hook) makes every auto comparison fail and the command
    exit 1, while torch against alone still passes: the check is what catches it."""
    code = main(
        [
            "gpu-check",
            "--dry-run",
            "--steps",
            "exactness",
            "--perturb-logprob",
            "1e-3",
            "--output",
            str(tmp_path),
        ]
    )
    assert code == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert not report["passed"] and len(report["exactness"]) == 12
    for row in report["exactness"]:
        verdicts = {(c["a"], c["b"]): c["passed"] for c in row["comparisons"]}
        assert verdicts == {("auto", "torch"): False, ("auto", "alone"): False, ("torch", "alone"): True}
    assert "FAILED" in capsys.readouterr().out


def test_time_guard_refuses_and_records():
    """The guard allows a part while its estimate fits before the limit less the reserve, and lists
    each refused part once."""
    now = [0.0]
    guard = TimeGuard(RESERVE_S + 10, clock=lambda: now[0])
    assert guard.allows("a", 9.0)
    now[0] = 5.0
    assert not guard.allows("b", 6.0) and not guard.allows("b", 6.0)
    assert guard.allows("c", 4.0)
    assert guard.skipped == ["b"]


def test_a_spent_time_limit_writes_what_it_has(tmp_path):
    """With no time left every step is skipped: the files are still written, the report lists the
    skipped steps and does not claim a pass."""
    assert main(["gpu-check", "--dry-run", "--time-limit", "1", "--output", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["skipped"] and not report["passed"] and report["exactness"] == []


def test_bad_input_exits_2(tmp_path, capsys):
    """An unknown step, an output that is a file and (without CUDA) a run without --dry-run are bad
    input: exit 2, the message names the problem, no traceback."""
    assert main(["gpu-check", "--dry-run", "--steps", "nope", "--output", str(tmp_path)]) == 2
    assert "steps" in capsys.readouterr().err
    file = tmp_path / "f"
    file.write_text("")
    assert main(["gpu-check", "--dry-run", "--output", str(file)]) == 2
    assert "folder" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["gpu-check", "--output", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert "CUDA" in err and "--dry-run" in err and "Traceback" not in err
