"""The command line: the contract's options, JSON fields and exit codes."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cpplan.cli import main
from cpplan.spec.units import MEMORY_MEANING

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpo.jsonl"
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
    assert data["strategy"] in ("cpsat", "greedy", "full_sharing", "seeded")
    assert {"cost_s", "waves", "solver", "candidates"} <= set(data)
    assert {"status", "bound_s", "gap", "model_gap", "wall_s"} <= set(data["solver"])
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
    here, below any request's peak) exits 3 naming the rank, the bytes needed and the budget, and says
    what would plan the whole workload: a budget at this topology, and that no CP size up to 8 times this
    one plans it within this budget."""
    code, _, err = run(["plan", EXAMPLE, *MODEL, "--topology", "cp=2", "--memory", "5.6GiB"], capsys)
    assert code == 3
    assert "rank" in err and f"{int(5.6 * 2**30):,} bytes" in err and "needs" in err
    assert "--memory 6634MiB (6.48 GiB) plans the whole workload at --topology cp=2" in err
    assert "no CP size up to cp=16 plans it within the budget of 5.60 GiB" in err


def test_nothing_fits_suggests_the_cp_size_that_fits(capsys):
    """When a larger CP size plans the whole workload within the same budget, the refusal names it."""
    args = ["plan", EXAMPLE, *MODEL, "--topology", "cp=1", "--memory", "7GiB"]
    code, _, err = run(args, capsys)
    assert code == 3
    assert "--topology cp=2 plans it within the budget of 7.00 GiB" in err


def test_gpu_memory_less_resident_is_the_memory(tmp_path, capsys):
    """`--gpu-memory 141GB --resident 75GB` plans exactly as `--memory 66GB` and says what it assumed."""
    base = ["plan", EXAMPLE, *MODEL, "--topology", "cp=2", "--solver", "deterministic", "--quiet"]
    code, by_gpu, err = run([*base, "--gpu-memory", "141GB", "--resident", "75GB"], capsys)
    assert code == 0
    assert "--memory 66,000,000,000 bytes (66.00 GB) = --gpu-memory 141GB - --resident 75GB" in err
    assert MEMORY_MEANING in err
    code, direct, _ = run([*base, "--memory", "66GB"], capsys)
    assert code == 0
    assert json.loads(by_gpu)["memory_bytes"] == json.loads(direct)["memory_bytes"] == 66 * 10**9


def test_memory_is_stated_one_way(capsys):
    """--memory means one thing, in the same words, in `--help`, in errors about it, in the README and in
    the CLI reference."""
    assert main(["plan", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert MEMORY_MEANING[1:] in help_text
    code, _, err = run(["plan", EXAMPLE, *MODEL], capsys)
    assert code == 2 and MEMORY_MEANING in err
    for doc in (ROOT / "README.md", ROOT / "docs" / "cli.md"):
        assert MEMORY_MEANING in " ".join(doc.read_text().split()), doc


@pytest.mark.skipif(
    shutil.which("cpplan") is None and not Path(sys.prefix, "bin", "cpplan").exists(),
    reason="console script not installed",
)
def test_console_script(tmp_path):
    """The installed `cpplan` console script runs the README's first command (its plan written to a
    temporary folder instead) and exits 0."""
    exe = shutil.which("cpplan") or str(Path(sys.prefix, "bin", "cpplan"))
    first = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].splitlines()[0]
    args = shlex.split(first.split("&& ", 1)[1])
    assert args[:2] == ["cpplan", "plan"]
    args[args.index("--output") + 1] = str(tmp_path / "p.json")
    proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "p.json").read_text())["waves"]


def test_readme_commands_write_outside_the_source_tree():
    """The README's commands that write files (`--output`) write under /tmp, never over tracked files
    (the shipped card, the benchmark results) or into the checkout."""
    readme = (ROOT / "README.md").read_text()
    outputs = [
        line.split("--output ", 1)[1].split()[0] for line in readme.splitlines() if "--output /" in line
    ]
    assert outputs
    assert all(path.startswith("/tmp/") for path in outputs), outputs
    first = readme.split("```bash\n", 1)[1].splitlines()[0]
    assert "cpplan plan examples/grpo.jsonl" in first and "--output /tmp/" in first
    assert "--output models/" not in readme and "--output plan.json" not in readme
