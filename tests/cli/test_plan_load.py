"""`cpplan plan` from a shell gives the same plan on a quiet and a busy machine: its default profile
has no wall-clock deadline; the time-budgeted `runtime` profile still works and its summary says
plainly when the deadline cut the search."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from cpplan.cli import main
from cpplan.cli.plan_cmd import CLI_SOLVER
from cpplan.planners.deadline import NO_TIME
from cpplan.plans import result as result_module
from cpplan.plans.plan_writer import strip_timing

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpo.jsonl"
BASE = ["plan", str(EXAMPLE), "--model", "qwen3.6-35b-a3b", "--topology", "cp=2"]


def busy_clock(monkeypatch) -> None:
    """A machine so loaded that every look at the clock finds 50 ms gone."""
    now = [time.perf_counter()]

    def slow() -> float:
        now[0] += 0.05
        return now[0]

    monkeypatch.setattr(time, "perf_counter", slow)


def plan_json(args: list[str], path: Path, capsys) -> tuple[dict, str]:
    """Run `cpplan plan ARGS -o PATH`: the plan JSON without its wall-clock fields, and standard error
    (its white space collapsed: the summary folds its lines at the console's width)."""
    assert main([*args, "-o", str(path)]) == 0
    return strip_timing(json.loads(path.read_text())), " ".join(capsys.readouterr().err.split())


def test_the_default_plan_is_the_same_on_a_busy_machine(tmp_path, monkeypatch, capsys):
    """The same command on a quiet machine and under a clock that loses 50 ms per reading gives the
    same plan JSON byte for byte (wall-clock fields aside), with no deadline note; `runtime` under the
    same clock is cut, which shows the clock bites."""
    args = [*BASE, "--memory", "8GiB"]
    quiet, _ = plan_json(args, tmp_path / "quiet.json", capsys)
    busy_clock(monkeypatch)
    busy, err = plan_json(args, tmp_path / "busy.json", capsys)
    assert json.dumps(busy, sort_keys=True) == json.dumps(quiet, sort_keys=True)
    assert quiet["profile"] == CLI_SOLVER == "deterministic"
    assert "deadline cut" not in err
    _, err = plan_json([*args, "--solver", "runtime"], tmp_path / "runtime.json", capsys)
    assert "note: deadline cut the search" in err and "--solver deterministic" in err


def test_a_cut_search_says_what_it_lost(tmp_path, monkeypatch, capsys):
    """Under `--solver runtime` on a busy machine the summary names how many items greedy packed at
    once with full sharing and which strategies never ran; the plan still verifies."""
    busy_clock(monkeypatch)
    path = tmp_path / "plan.json"
    assert main([*BASE, "--memory", "8GiB", "--solver", "runtime", "-o", str(path)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "deadline cut the search after" in err and "of 6 items:" in err
    assert "packed at once with full sharing" in err and "not run for lack of time:" in err
    assert main(["verify", str(path), str(EXAMPLE)]) == 0


def test_the_note_reads_the_portfolios_skip_reason():
    """The summary recognises a skipped strategy by the portfolio's own reason text."""
    assert result_module._SKIPPED == NO_TIME


def test_dynamic_cp_under_the_default_is_not_cut(tmp_path, monkeypatch, capsys):
    """`--dynamic-cp` under the default profile runs every strategy to its end, even on a busy machine:
    no candidate was skipped for time and no wave was packed in a hurry."""
    busy_clock(monkeypatch)
    args = [*BASE[:-1], "cp=2,dp=2", "--dynamic-cp", "--memory", "8GiB"]
    data, err = plan_json(args, tmp_path / "plan.json", capsys)
    assert all(NO_TIME not in c["reason"] for c in data["candidates"]), data["candidates"]
    assert "deadline" not in err


def test_a_memory_sweep_is_monotone_under_the_default(tmp_path, monkeypatch, capsys):
    """More memory never gives a costlier plan under the default profile, on a busy machine too."""
    busy_clock(monkeypatch)
    costs = []
    for gib in (7, 8, 9, 10, 12, 16):
        data, _ = plan_json([*BASE, "--memory", f"{gib}GiB"], tmp_path / f"{gib}.json", capsys)
        costs.append(data["cost_s"])
    assert all(later <= earlier for earlier, later in itertools.pairwise(costs)), costs


@pytest.mark.parametrize("flag", ["-o", "--output"])
def test_output_has_a_short_form(tmp_path, flag, capsys):
    """`-o` is `--output`."""
    path = tmp_path / "plan.json"
    assert main([*BASE, "--memory", "12GiB", "--quiet", flag, str(path)]) == 0
    assert json.loads(path.read_text())["waves"]
