"""Bad input through the CLI and the Python API: exit 2 / a typed exception naming field, file and line,
no traceback, no request dropped. The cases live in ``bad_input_cases.py``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cpplan
from cpplan.cli import main
from tests.support.bad_input_cases import CASES, OK_WORKLOAD, TINY_CARD, Case, run_case

ROOT = Path(__file__).resolve().parents[2]


def test_catalogue_is_large_and_distinct():
    """The catalogue holds at least 25 kinds of bad input, each named once."""
    kinds = [case.kind for case in CASES]
    assert len(kinds) >= 25
    assert len(set(kinds)) == len(kinds)


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_bad_input_is_reported(case: Case, tmp_path: Path):
    """The CLI exits 2 without a traceback and the API raises the typed error; both messages name
    the field, the file and the line the case expects."""
    outcome = run_case(case, tmp_path)
    if case.api_only:
        assert isinstance(outcome.api_exception, case.api_error), repr(outcome.api_exception)
        assert all(part in str(outcome.api_exception) for part in case.expect), str(outcome.api_exception)
        return
    assert outcome.exit_code == 2, outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert outcome.stderr.strip(), "the CLI said nothing"
    for part in case.expect:
        assert part in outcome.stderr, (part, outcome.stderr)
    if case.cli_only:
        return
    assert isinstance(outcome.api_exception, case.api_error), repr(outcome.api_exception)
    for part in case.expect:
        assert part in str(outcome.api_exception), (part, str(outcome.api_exception))


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.kind in ("malformed JSON line", "card: NaN coefficient", "memory not finite")],
    ids=lambda c: c.kind,
)
def test_installed_command_prints_no_traceback(case: Case, tmp_path: Path):
    """Run as a separate process, the command exits 2 and standard error holds one message and no
    traceback."""
    run_case(case, tmp_path)  # writes the files
    proc = subprocess.run(
        [sys.executable, "-c", "from cpplan.cli import run; run()", *case.argv()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("cpplan: error: ")
    assert proc.stdout == ""


def _requests_in_plan(data: dict) -> list[tuple[str, int]]:
    return sorted((r["item"], r["request"]) for w in data["waves"] for r in w["requests"])


def test_valid_edge_inputs_lose_no_request(tmp_path: Path):
    """A byte-order mark, blank lines, Windows line ends, identical requests within and across items
    and the one-request form are all planned: every request of the file is in exactly one wave."""
    text = (
        '\ufeff{"id": "a", "requests": [{"tokens": [5, 6, 7]}, {"tokens": [5, 6, 7]}, {"tokens": [5]}]}\r\n'
        "\n"
        '{"id": "b", "tokens": [5, 6, 7], "grad": false}\r\n'
        '   \n{"id": "c", "requests": [{"tokens": [9], "output": "none"}]}'
    )
    (tmp_path / "w.jsonl").write_text(text, encoding="utf-8")
    (tmp_path / "tiny.toml").write_text(TINY_CARD, encoding="utf-8")
    out = tmp_path / "plan.json"
    args = ["plan", str(tmp_path / "w.jsonl"), "--model", str(tmp_path / "tiny.toml"), "--memory", "64MiB"]
    code = main([*args, "--output", str(out), "--quiet"])
    assert code == 0
    data = json.loads(out.read_text())
    assert _requests_in_plan(data) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 0)]
    workload = cpplan.Workload.from_jsonl(tmp_path / "w.jsonl")
    assert workload.lines == (1, 3, 5)


def test_item_lines_follow_subsets(tmp_path: Path):
    """A subset of a workload read from a file keeps each item's source line, so errors found later
    (a sequence longer than the context) still name the right line."""
    (tmp_path / "w.jsonl").write_text(OK_WORKLOAD + '\n{"id": "p2", "tokens": [1]}\n', encoding="utf-8")
    workload = cpplan.Workload.from_jsonl(tmp_path / "w.jsonl")
    assert workload.lines == (1, 2, 4)
    assert workload.subset(["p2", "p0"]).lines == (4, 1)


def test_docs_table_is_generated_from_the_current_messages():
    """docs/bad_input.md is exactly what docs/make_bad_input.py writes from the cases' actual messages
    (regenerate it with ``python docs/make_bad_input.py`` after changing a message)."""
    spec = importlib.util.spec_from_file_location("make_bad_input", ROOT / "docs" / "make_bad_input.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "bad_input.md").read_text(encoding="utf-8") == module.render(module.collect())


def test_fewer_chunks_than_cp_ranks_leave_ranks_empty(tmp_path: Path):
    """One rule for waves with fewer 128-token chunks than CP ranks: they are planned, and the ranks
    after the last chunk own nothing (3 tokens at cp=8 as for 8 chunks); the verifier accepts it."""
    (tmp_path / "w.jsonl").write_text('{"id": "p0", "tokens": [1, 2, 3]}\n', encoding="utf-8")
    (tmp_path / "tiny.toml").write_text(TINY_CARD, encoding="utf-8")
    out = tmp_path / "plan.json"
    args = ["plan", str(tmp_path / "w.jsonl"), "--model", str(tmp_path / "tiny.toml"), "--memory", "64MiB"]
    assert main([*args, "--topology", "cp=8", "--output", str(out), "--quiet"]) == 0
    ranks = json.loads(out.read_text())["waves"][0]["ranks"]
    assert [r["tokens"] for r in ranks] == [3, 0, 0, 0, 0, 0, 0, 0]
    assert main(["verify", str(out), str(tmp_path / "w.jsonl"), "--model", str(tmp_path / "tiny.toml")]) == 0


def test_most_ranks_owning_nothing_is_warned_about(tmp_path: Path, capsys):
    """A plan in which most CP ranks own no token in any wave (3 tokens at cp=8) is written, and standard
    error names how many ranks own nothing (even with --quiet); a plan using its one rank warns of nothing."""
    (tmp_path / "w.jsonl").write_text('{"id": "p0", "tokens": [1, 2, 3]}\n', encoding="utf-8")
    (tmp_path / "tiny.toml").write_text(TINY_CARD, encoding="utf-8")
    args = ["plan", str(tmp_path / "w.jsonl"), "--model", str(tmp_path / "tiny.toml"), "--memory", "64MiB"]
    assert main([*args, "--topology", "cp=8", "--output", str(tmp_path / "a.json"), "--quiet"]) == 0
    assert "warning: 7 of the 8 CP ranks own no token in any wave" in capsys.readouterr().err
    assert main([*args, "--output", str(tmp_path / "b.json"), "--quiet"]) == 0
    assert "own no token" not in capsys.readouterr().err


def test_a_dash_plans_the_workload_on_standard_input(tmp_path: Path, monkeypatch, capsys):
    """`cpplan plan -` reads the workload from standard input (the same plan as from the file); a bad line
    there is exit 2 naming <stdin> and the line, never "No such file"."""
    import io

    (tmp_path / "w.jsonl").write_text(OK_WORKLOAD, encoding="utf-8")
    (tmp_path / "tiny.toml").write_text(TINY_CARD, encoding="utf-8")
    settings = ["--model", str(tmp_path / "tiny.toml"), "--memory", "64MiB", "--quiet"]
    assert main(["plan", str(tmp_path / "w.jsonl"), *settings, "-o", str(tmp_path / "file.json")]) == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(OK_WORKLOAD.encode())))
    assert main(["plan", "-", *settings, "-o", str(tmp_path / "stdin.json")]) == 0
    assert _requests_in_plan(json.loads((tmp_path / "stdin.json").read_text())) == _requests_in_plan(
        json.loads((tmp_path / "file.json").read_text())
    )
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((OK_WORKLOAD + "{oops\n").encode())))
    assert main(["plan", "-", *settings]) == 2
    err = capsys.readouterr().err
    assert "<stdin>:3" in err and "malformed JSON" in err and "No such file" not in err
