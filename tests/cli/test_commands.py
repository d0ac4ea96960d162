"""The command line: the contract's options, JSON fields and exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cpplan.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo.jsonl"
MODEL = ["--model", "qwen3.6-35b-a3b"]


def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_then_verify_bundled_example(tmp_path, capsys):
    """`cpplan plan` on the bundled example exits 0 and writes the contract's JSON fields with a
    summary table on stderr; `cpplan verify` of that file exits 0."""
    plan_path = tmp_path / "plan.json"
    code, _, err = run(
        ["plan", EXAMPLE, *MODEL, "--topology", "cp=2", "--memory", "12GiB", "--output", plan_path], capsys
    )
    assert code == 0
    assert "busiest rank" in err and "candidates" in err
    data = json.loads(plan_path.read_text())
    assert data["strategy"] in ("cpsat", "greedy", "full_sharing")
    assert {"cost_s", "waves", "solver", "candidates"} <= set(data)
    assert {"status", "bound_s", "gap", "wall_s"} <= set(data["solver"])
    assert all({"strategy", "cost_s", "valid", "reason"} <= set(c) for c in data["candidates"])
    wave = data["waves"][0]
    assert {"items", "packed_tokens", "cost_s", "ranks"} <= set(wave)
    assert len(wave["ranks"]) == 2 and all(
        {"tokens", "peak_bytes", "breakdown"} <= set(r) for r in wave["ranks"]
    )
    assert sum(len(w["items"]) for w in data["waves"]) == 6
    code, _, err = run(
        ["verify", plan_path, EXAMPLE, *MODEL, "--topology", "cp=2", "--memory", "12GiB"], capsys
    )
    assert code == 0 and "valid" in err


def test_verify_reports_violations(tmp_path, capsys):
    """`cpplan verify` exits 1 listing each violation when the plan breaks the budget it is checked at."""
    plan_path = tmp_path / "plan.json"
    assert (
        run(
            [
                "plan",
                EXAMPLE,
                *MODEL,
                "--topology",
                "cp=2",
                "--memory",
                "12GiB",
                "--output",
                plan_path,
                "--quiet",
            ],
            capsys,
        )[0]
        == 0
    )
    code, _, err = run(
        ["verify", plan_path, EXAMPLE, *MODEL, "--topology", "cp=2", "--memory", "4GiB"], capsys
    )
    assert code == 1 and "violation: wave 0 rank" in err and "exceeds the budget" in err


def write(tmp_path, text):
    path = tmp_path / "w.jsonl"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "extra", "needle"),
    [
        ("", [], "empty"),
        ('{"id": "a", "tokens": [1, 2]}\n{"id": "b", "tokens": [1,\n', [], "w.jsonl:2: malformed JSON"),
        ('{"id": "a", "tokens": []}\n', [], "w.jsonl:1, field 'requests.0.tokens': must not be empty"),
        ('{"id": "a", "tokens": [1, -4]}\n', [], "outside [0, 2147483647]"),
        ('{"id": "a", "tokens": [1, "x"]}\n', [], "not an integer"),
        ('{"id": "a", "tokens": [1, 2]}\n', ["--topology", "cp=0"], "topology.cp"),
        ('{"id": "a", "tokens": [1, 2]}\n', ["--model", "nope"], "unknown model 'nope'"),
        ('{"id": "a", "tokens": [1, 2]}\n', ["--memory", "80XB"], "unknown unit 'XB'"),
    ],
)
def test_bad_input_exits_2_without_traceback(tmp_path, capsys, text, extra, needle):
    """Bad input exits 2 with a message naming the problem (file, line, field) and no traceback."""
    args = ["plan", write(tmp_path, text), *MODEL, "--memory", "80GiB", *extra]
    code, out, err = run(args, capsys)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and out == ""


def test_nothing_fits_exits_3(capsys):
    """A workload whose single request cannot fit (a budget above the card's static floor of 5.51 GiB
    here, below any request's peak) exits 3 naming the rank, the bytes needed and the budget."""
    code, _, err = run(["plan", EXAMPLE, *MODEL, "--topology", "cp=2", "--memory", "5.6GiB"], capsys)
    assert code == 3
    assert "rank" in err and f"{int(5.6 * 2**30):,} bytes" in err and "needs" in err


@pytest.mark.skipif(
    shutil.which("cpplan") is None and not Path(sys.prefix, "bin", "cpplan").exists(),
    reason="console script not installed",
)
def test_console_script(tmp_path):
    """The installed `cpplan` console script runs the README's first command and exits 0."""
    exe = shutil.which("cpplan") or str(Path(sys.prefix, "bin", "cpplan"))
    proc = subprocess.run(
        [
            exe,
            "plan",
            str(EXAMPLE),
            *MODEL,
            "--topology",
            "cp=2",
            "--memory",
            "12GiB",
            "--output",
            str(tmp_path / "p.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "p.json").read_text())["waves"]
