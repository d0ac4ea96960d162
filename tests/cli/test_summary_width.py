"""The plan summary reads whole at 80 columns (the CLI's tables on a pipe, and ``PlanResult.summary()``),
piped output honours ``COLUMNS``, and a bound printed never reads above the plan it bounds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import cpplan
from cpplan.cli import main
from cpplan.plans.outcome import Scope
from cpplan.plans.plan import SolverStats
from cpplan.plans.result import bound_sentence, bound_text, seconds_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpo.jsonl"
TOPOLOGIES = ("cp=1", "cp=2", "dp=2,cp=2", "dp=2,cp=2,dynamic_cp=1")


@pytest.fixture(scope="module")
def planned() -> dict[str, tuple[str, dict]]:
    """Per topology, the summary `cpplan plan` of the README example at 8 GiB prints on a pipe with no
    ``COLUMNS``, and its plan JSON."""
    found = {}
    capture = pytest.MonkeyPatch()
    capture.delenv("COLUMNS", raising=False)
    for topology in TOPOLOGIES:
        found[topology] = _plan(topology)
    capture.undo()
    return found


def _plan(topology: str, *extra: str) -> tuple[str, dict]:
    """`cpplan plan` of the README example at ``topology``: its standard error and plan JSON."""
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    args = ["plan", str(EXAMPLE), "--model", "qwen3.6-35b-a3b", "--topology", topology, "--memory", "8GiB"]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        assert main([*args, *extra]) == 0
    return err.getvalue(), json.loads(out.getvalue())


HEADER_WORDS = frozenset(
    [
        "wave",
        "runs",
        "on",
        "GPUs",
        "starts",
        "at",
        "items",
        "layout",
        "packed",
        "logical",
        "tokens",
        "predicted",
        "seconds",
        "busiest",
        "rank",
        "its",
        "local",
        "peak",
        "of",
        "budget",
        "dp",
        "replica",
        "strategy",
        "waves",
        "valid",
        "reason",
    ]
)


def cut_words(text: str) -> set[str]:
    """Pieces of header words in ``text``: a word of three letters or more that begins or ends a header
    word without being one (``predic``, ``ted``: a header folded inside a word)."""
    return {
        word
        for word in re.findall(r"\w+", text)
        if len(word) >= 3 and word not in HEADER_WORDS
        for whole in HEADER_WORDS
        if whole.startswith(word) or whole.endswith(word)
    }


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_the_summary_reads_whole_at_80_columns(planned, topology):
    """Piped with no COLUMNS, no summary line is wider than 80 columns, no cell is cut with an ellipsis,
    no header is folded inside a word, and every wave's packed tokens and predicted seconds and the
    total's appear whole."""
    err, plan = planned[topology]
    assert max(len(line) for line in err.splitlines()) <= 80
    assert "…" not in err and not cut_words(err)
    for wave in plan["waves"]:
        assert f"{wave['packed_tokens']:,}" in err and seconds_text(wave["cost_s"]) in err
    assert re.search(rf"total\s.*\s{re.escape(seconds_text(plan['cost_s']))}\s", err)


def test_piped_output_honours_columns(monkeypatch):
    """With COLUMNS=200 on a pipe the wave table is one table as wide as it needs (wider than 80, within
    200); with COLUMNS=80 it is split in two."""
    monkeypatch.setenv("COLUMNS", "200")
    wide, _ = _plan("dp=2,cp=2", "--solver", "runtime")
    monkeypatch.setenv("COLUMNS", "80")
    narrow, _ = _plan("dp=2,cp=2", "--solver", "runtime")
    assert 80 < max(len(line) for line in wide.splitlines()) <= 200
    assert any("runs on GPUs" in line and "busiest rank" in line for line in wide.splitlines())
    assert "busiest rank of each wave" in narrow and "busiest rank of each wave" not in wide


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_python_summary_lines_fit_80_columns(topology):
    """``PlanResult.summary()`` folds its sentences so that no line is wider than 80 columns, and keeps
    every word."""
    workload = cpplan.Workload.from_jsonl(EXAMPLE)
    result = cpplan.plan(
        workload, topology=topology, model="qwen3.6-35b-a3b", memory_bytes="8GiB", solver="runtime"
    )
    text = result.summary()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert result.decision() in " ".join(text.split())


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_printed_bound_never_reads_above_the_printed_plan(planned, topology):
    """Every number the summary's bound sentence prints is at most the chosen plan's printed cost (the
    dp=2,cp=2 schedule model's bound, 0.69945 s in its rounded-up microseconds, is above the plan's
    exact 0.699449 s: it must not read 0.6995 beside 0.6994)."""
    err, _ = planned[topology]
    text = " ".join(err.split())
    cost = float(re.search(r"chosen: \w+ at (\d+\.\d+) s predicted", text).group(1))
    bound = re.search(r"bound: (.*?)(?: note:|$)", text).group(1)
    assert all(float(number) <= cost for number in re.findall(r"\d+\.\d{4}(?= s)", bound))


def test_a_bound_prints_rounded_down_and_a_model_bound_above_the_price_prints_no_number():
    """A bound prints at four decimals rounded down (one exactly at a printed price prints that price);
    a conservative model's bound above the plan's exact price says so instead of printing a number."""
    assert (
        bound_text(0.69945) == "0.6994" and bound_text(0.6994) == "0.6994" and bound_text(1.96999) == "1.9699"
    )
    model = SolverStats(bound_s=0.69945, bound_scope=Scope.MODEL)
    above = bound_sentence(model, 0.6994490802981614)
    assert "above this plan's exact price" in above and "0.6995" not in above
    below = bound_sentence(SolverStats(bound_s=0.59, bound_scope=Scope.MODEL), 0.5900432)
    assert "(0.5900 s)" in below
    every = bound_sentence(SolverStats(bound_s=1.03259, bound_scope=Scope.ALL_PLANS), 1.1922)
    assert "less than 1.0325 s" in every
