"""``benchmarks/reproduce.py`` and its registry of cited figures (``benchmarks/cited_figures.py``): every
figure the README's first screen and docs/benchmarks.md cite is registered, each reads from its run's
JSON, and no run can overwrite the committed results. Nothing here reruns a benchmark."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\w.\-/])\d[\d,]*(?:\.\d+)?")
"""A number as prose writes it (``88``, ``26,624``, ``2.1``), not a digit inside a name (``Qwen3``)."""


def _module(name: str):
    """A benchmark script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reproduce():
    """``benchmarks/reproduce.py``."""
    return _module("reproduce")


@pytest.fixture(scope="module")
def registry():
    """``benchmarks/cited_figures.py``."""
    return _module("cited_figures")


def first_screen(readme: str) -> str:
    """The README up to its first second-level heading (what cpplan gains and the two commands)."""
    return readme.split("\n## ", 1)[0]


def prose(text: str) -> str:
    """``text`` with fenced blocks, inline code and link targets blanked (same length, so offsets hold):
    commands and paths are not figures."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", blank, text)
    return re.sub(r"\]\([^)]*\)", blank, text)


def uncovered(text: str, covers: list[str], pattern) -> list[str]:
    """Each number of ``text``'s prose that lies inside no occurrence of any ``covers`` string (found by
    ``pattern``, the registry's wrapping-blind match), with the words around it."""
    spans = [(m.start(), m.end()) for c in covers if c for m in pattern(c).finditer(text)]
    misses = []
    for m in NUMBER.finditer(prose(text)):
        if not any(a <= m.start() and m.end() <= b for a, b in spans):
            misses.append(f"{m.group(0)!r} in {text[max(0, m.start() - 40) : m.end() + 40]!r}")
    return misses


def covers_of(registry, doc: str) -> list[str]:
    """The cited texts of ``doc``'s figures and its input texts."""
    return [f.cited for f in registry.FIGURES if f.doc == doc] + [
        i.text for i in registry.INPUTS if i.doc == doc
    ]


def test_every_number_on_the_readme_first_screen_is_a_registered_figure_or_input(registry):
    """Each number in the prose of the README's first screen lies inside a registered figure's cited
    text or a registered input's text: a new figure without a command fails here."""
    readme = (ROOT / "README.md").read_text()
    assert uncovered(first_screen(readme), covers_of(registry, "README.md"), registry.cited_pattern) == []


COVERED_DOCS = ("docs/benchmarks.md", "docs/runtime.md", "docs/memory.md")
"""The docs whose every number is registered (a figure with its command, or an input)."""


@pytest.mark.parametrize("doc", COVERED_DOCS)
def test_every_number_in_a_covered_doc_is_a_registered_figure_or_input(registry, doc):
    """Each number in the prose and tables of a covered doc lies inside a registered figure's cited text
    or a registered input's text: a new figure there without a command fails here."""
    text = (ROOT / doc).read_text()
    assert uncovered(text, covers_of(registry, doc), registry.cited_pattern) == []


def test_the_coverage_check_catches_an_unregistered_figure(registry):
    """A number outside every cited text is reported; one inside a cited text (however the line wraps),
    in inline code or in a name is not."""
    text = "gains **2.1×** on\n88 instances, `cpplan bench --cp 4`, Qwen3; and 7.5 s new"
    misses = uncovered(text, ["**2.1×** on 88 instances"], registry.cited_pattern)
    assert [m.split(" in ")[0] for m in misses] == ["'7.5'"]


def test_every_registered_figure_is_cited_in_its_doc_as_stated(registry):
    """Each figure's cited text is in its doc verbatim and holds the stated value; each input's text is
    in its doc; each figure names a registered run."""
    runs = {r.name for r in registry.RUNS}
    for figure in registry.FIGURES:
        text = (ROOT / figure.doc).read_text()
        assert registry.cited_pattern(figure.cited).search(text), (figure.doc, figure.cited)
        assert figure.stated in figure.cited, (figure.stated, figure.cited)
        assert figure.run in runs, figure.run
    for item in registry.INPUTS:
        assert registry.cited_pattern(item.text).search((ROOT / item.doc).read_text()), (item.doc, item.text)


def _bench_json() -> dict:
    """A two-planner bench result in ``cpplan bench``'s JSON shape."""
    headline = [
        {
            "family": "all",
            "planner": "verl_dynamic_bsz",
            "vs_cpplan": 2.0996,
            "oom_plans": 12,
            "instances": 88,
        },
        {"family": "all", "planner": "megatron_zigzag", "vs_cpplan": 2.161, "oom_plans": 67, "instances": 88},
        {"family": "all", "planner": "cpplan", "vs_cpplan": 1.0, "oom_plans": 0, "instances": 88},
    ]
    rows = [
        {"case": "long_tail", "cp": 4, "memory": "80GiB", "planner": "cpplan", "cost_s": 8.5728},
        {"case": "long_tail", "cp": 4, "memory": "80GiB", "planner": "megatron_zigzag", "cost_s": 8.3207},
    ]
    return {"headline": headline, "rows": rows}


def test_readers_format_a_run_json_as_the_docs_state_it(registry):
    """The readers turn a run's JSON into the doc's text: ratios to the stated digits, OOM ranges, percent
    differences, counts of instances within a tolerance and the TRL step's speed-ups."""
    bench = _bench_json()
    assert registry.ratio(bench, "all", "verl_dynamic_bsz") == "2.1"
    assert registry.ratio(bench, "all", "megatron_zigzag", 2) == "2.16"
    assert registry.oom_range(bench, ("verl_dynamic_bsz", "megatron_zigzag")) == "12 to 67"
    assert registry.cheaper_pct(bench, "long_tail", 4, "80GiB", "megatron_zigzag") == "2.9%"
    ownership = {"rows": [{"objective_s": 0.9995, "price_s": 1.0}, {"objective_s": 0.99, "price_s": 1.0}]}
    assert registry.within(ownership, 0.001) == "1 of 2"
    trl = {"runs": [{"busy_processes": 0, "speedup": 8.176, "token_ratio": 4.38}]}
    assert registry.trl_speedup(trl, 0) == "8.2"
    assert registry.trl_speedup(trl, 2) == "not run"


def _fake_runs(registry, script: str):
    """One registered run of a tiny command and one figure read from it."""
    run = registry.Run(name="fake", command=("{python}", "-c", script, "{out}"))
    figure = registry.Figure(
        doc="README.md", cited="x", stated="42", run="fake", read=lambda d: str(d["value"]), what="fake"
    )
    return (run,), (figure,)


def test_a_run_writes_only_into_outdir_and_the_table_compares_stated_and_measured(
    reproduce, registry, tmp_path
):
    """A (tiny, fake) run writes its JSON and log into OUTDIR; the committed folder is untouched; the row
    carries the stated and measured figure, whether they match and the command."""
    committed = tmp_path / "results"
    committed.mkdir()
    (committed / "kept.json").write_text("{}")
    script = "import json, sys; json.dump({'value': 42}, open(sys.argv[1], 'w'))"
    runs, figures = _fake_runs(registry, script)
    table = reproduce.reproduce(
        tmp_path / "out", quick=True, runs=runs, figures=figures, committed=(committed,)
    )
    assert table == [
        {
            "doc": "README.md",
            "figure": "fake",
            "stated": "42",
            "measured": "42",
            "match": True,
            "command": f"python -c {script} OUTDIR/fake.json",
            "smaller_run": False,
            "skipped": False,
        }
    ]
    assert json.loads((tmp_path / "out" / "fake.json").read_text()) == {"value": 42}
    assert (tmp_path / "out" / "fake.log").exists()
    assert (committed / "kept.json").read_text() == "{}"


def test_an_outdir_inside_the_committed_results_is_refused(reproduce, registry, tmp_path):
    """OUTDIR equal to, or inside, a committed results folder is refused before anything runs."""
    committed = tmp_path / "results"
    committed.mkdir()
    runs, figures = _fake_runs(registry, "raise SystemExit(3)")
    for outdir in (committed, committed / "quick"):
        with pytest.raises(SystemExit, match="inside"):
            reproduce.reproduce(outdir, quick=True, runs=runs, figures=figures, committed=(committed,))
    assert not (committed / "quick").exists()


def test_a_run_that_changes_a_committed_result_fails(reproduce, registry, tmp_path):
    """A command that rewrites a committed result file is caught by the before/after digests."""
    committed = tmp_path / "results"
    committed.mkdir()
    (committed / "kept.json").write_text("{}")
    script = f"import sys; open({str(committed / 'kept.json')!r}, 'w').write('changed')"
    runs, figures = _fake_runs(registry, script)
    with pytest.raises(SystemExit, match="changed committed results"):
        reproduce.reproduce(tmp_path / "out", quick=True, runs=runs, figures=figures, committed=(committed,))


def test_a_failed_run_is_reported_in_the_measured_column(reproduce, registry, tmp_path):
    """A command that exits non-zero leaves its figures' measured cell saying so, not a traceback."""
    runs, figures = _fake_runs(registry, "raise SystemExit(3)")
    table = reproduce.reproduce(tmp_path / "out", quick=True, runs=runs, figures=figures, committed=())
    assert table[0]["measured"].startswith("failed (exit 3")
    assert table[0]["match"] is False


@pytest.mark.parametrize("script", ["bench_runtime", "bench_scale", "bench_ownership", "bench_integrations"])
def test_a_quick_benchmark_run_defaults_away_from_the_committed_results(script):
    """Without ``--output`` a quick run writes ./cpplan-bench/<script>_quick.json, a full run the committed
    file under benchmarks/results/, and ``--output`` wins over both."""
    bench = _module(script)
    quick = bench.output_path(quick=True, output=None)
    assert quick == Path("cpplan-bench") / f"{script}_quick.json"
    assert bench.output_path(quick=False, output=None) == ROOT / "benchmarks" / "results" / f"{script}.json"
    assert bench.output_path(quick=True, output=Path("x.json")) == Path("x.json")


@pytest.mark.parametrize("script", ["bench_dynamic_cp", "bench_equal_waves"])
def test_a_quick_suite_run_defaults_away_from_the_committed_results(script):
    """The dynamic-CP and equal-waves scripts: without ``--output`` a quick run writes
    ./cpplan-bench/<script>_quick.json (never the committed ``bench_equal_waves_quick.json``), a full run
    the committed file, and ``--output`` wins over both."""
    bench = _module(script)
    assert bench.output_path(quick=True, output=None) == Path("cpplan-bench") / f"{script}_quick.json"
    assert bench.output_path(quick=False, output=None) == ROOT / "benchmarks" / "results" / f"{script}.json"
    assert bench.output_path(quick=True, output=Path("x.json")) == Path("x.json")


def test_a_quick_trl_step_run_defaults_away_from_the_committed_results():
    """``bench_trl_step.py --quick`` (tiny or not) writes under ./cpplan-bench/, a full run the committed
    file under benchmarks/results/, and ``--output`` wins over both."""
    bench = _module("bench_trl_step")
    results = ROOT / "benchmarks" / "results"
    for tiny, name in ((False, "bench_trl_step"), (True, "bench_trl_step_tiny")):
        assert (
            bench.output_path(quick=True, tiny=tiny, output=None)
            == Path("cpplan-bench") / f"{name}_quick.json"
        )
        assert bench.output_path(quick=False, tiny=tiny, output=None).resolve() == results / f"{name}.json"
    assert bench.output_path(quick=True, tiny=False, output=Path("x.json")) == Path("x.json")


def test_cpplan_bench_dynamic_cp_writes_under_cpplan_bench_by_default(monkeypatch, tmp_path):
    """``cpplan bench --dynamic-cp [--quick]`` without ``--output`` saves ./cpplan-bench/bench_dynamic_cp
    [_quick].json in the working folder, not ./benchmarks/ (the suite itself is replaced by a stub result
    here: what is checked is where it is saved)."""
    from click.testing import CliRunner

    import cpplan.bench.dynamic as dynamic
    from cpplan.cli import cli

    monkeypatch.setattr(dynamic, "run_dynamic_bench", lambda **_: {"summary": [], "rows": [], "wall_s": 0.0})
    monkeypatch.setattr(dynamic, "format_summary", lambda summary: "summary")
    monkeypatch.chdir(tmp_path)
    for flags, name in (((), "bench_dynamic_cp.json"), (("--quick",), "bench_dynamic_cp_quick.json")):
        result = CliRunner().invoke(cli, ["bench", "--dynamic-cp", *flags])
        assert result.exit_code == 0, result.output
        assert (tmp_path / "cpplan-bench" / name).exists()
    assert not (tmp_path / "benchmarks").exists()


def test_a_quick_runs_smaller_variant_is_marked_as_such(reproduce, registry, tmp_path):
    """Under ``--quick`` a run with a smaller variant runs that variant, and its figures are marked
    ``smaller_run`` (their mismatch expected, not a failure); a full run runs the cited command."""
    script = "import json, sys; json.dump({'value': int(sys.argv[2])}, open(sys.argv[1], 'w'))"
    run = registry.Run(
        name="fake",
        command=("{python}", "-c", script, "{out}", "42"),
        quick_command=("{python}", "-c", script, "{out}", "7"),
    )
    figure = registry.Figure(
        doc="README.md", cited="x", stated="42", run="fake", read=lambda d: str(d["value"]), what="f"
    )
    quick = reproduce.reproduce(tmp_path / "q", quick=True, runs=(run,), figures=(figure,), committed=())
    assert (quick[0]["measured"], quick[0]["match"], quick[0]["smaller_run"]) == ("7", False, True)
    assert "no (smaller run)" in reproduce.markdown(quick)
    full = reproduce.reproduce(tmp_path / "f", quick=False, runs=(run,), figures=(figure,), committed=())
    assert (full[0]["measured"], full[0]["match"], full[0]["smaller_run"]) == ("42", True, False)


COMMITTED_RUNS = {
    "runtime_steps": "benchmarks/results/bench_runtime.json",
    "scale": "benchmarks/results/bench_scale.json",
    "fixed_share": "benchmarks/results/bench_scale_cluster.json",
    "fixed_share_busy": "benchmarks/results/bench_scale_cluster.json",
    "partition": "benchmarks/results/bench_scale_partition.json",
    "memory_table": "docs/memory.json",
    "cp_scaling": "benchmarks/results/cp_scaling.json",
    "trl_step": "benchmarks/results/bench_trl_step.json",
    "trl_step_tiny": "benchmarks/results/bench_trl_step_tiny.json",
    "equal_waves": "benchmarks/results/bench_equal_waves.json",
    "sharing_overhead": "benchmarks/results/bench_sharing_overhead.json",
    "integrations": "benchmarks/results/bench_integrations.json",
    "art_pack": "benchmarks/results/bench_art_pack.json",
    "gdn_modes": "benchmarks/results/gdn_modes.json",
}
"""Runs whose cited JSON is committed, by run name: their figures read back as stated."""


@pytest.mark.parametrize("run", sorted(COMMITTED_RUNS))
def test_figures_read_from_the_committed_run_are_as_stated(registry, run):
    """Every figure of a run whose JSON is committed reads, from that JSON, exactly the value its doc
    states: the doc's tables and prose say what the committed run measured."""
    data = json.loads((ROOT / COMMITTED_RUNS[run]).read_text())
    figures = [f for f in registry.FIGURES if f.run == run]
    assert figures
    assert [(f.what, f.read(data)) for f in figures] == [(f.what, f.stated) for f in figures]


def test_a_run_that_needs_a_gpu_is_skipped_without_one_and_says_so(reproduce, registry, tmp_path):
    """A run marked ``needs_gpu`` is not started on a machine without CUDA: its outcome says it was
    skipped for want of a GPU and its figures are marked skipped, not mismatched; with CUDA it runs.
    The kernel timings docs/time_model.md cites are such a run."""
    script = "import json, sys; json.dump({'value': 42}, open(sys.argv[1], 'w'))"
    run = registry.Run(name="gpu", command=("{python}", "-c", script, "{out}"), needs_gpu=True)
    outcome = reproduce.execute(run, tmp_path, quick=False, reuse=False, cuda=False)
    assert (outcome.data, outcome.status) == (None, reproduce.GPU_SKIP)
    assert not (tmp_path / "gpu.json").exists()
    figure = registry.Figure(
        doc="d", cited="x", stated="42", run="gpu", read=lambda d: str(d["value"]), what="g"
    )
    row = reproduce.rows((figure,), {"gpu": outcome}, quick=False)[0]
    assert row["skipped"] and "skipped (GPU)" in reproduce.markdown([row])
    assert reproduce.execute(run, tmp_path, quick=False, reuse=False, cuda=True).data == {"value": 42}
    kernels = {r.name: r for r in registry.RUNS}["kernels"]
    assert kernels.needs_gpu and any(
        f.run == "kernels" and f.doc == "docs/time_model.md" for f in registry.FIGURES
    )


def test_trl_readers_say_not_run_for_the_busy_run_a_quick_run_leaves_out(registry):
    """From a quick TRL step run (the quiet run only), every figure of the busy run reads ``not run``
    and every figure of the quiet run reads a value: no reader fails on the smaller JSON."""
    full = json.loads((ROOT / "benchmarks/results/bench_trl_step.json").read_text())
    quick = {**full, "runs": [r for r in full["runs"] if r["busy_processes"] == 0]}
    figures = [f for f in registry.FIGURES if f.run == "trl_step"]
    values = {f.what: f.read(quick) for f in figures}
    busy = [w for w in values if "row 3," in w or "row 4," in w or "slowed" in w or "2 busy" in w]
    assert busy and all(values[w] == "not run" for w in busy)
    assert all(v != "not run" for w, v in values.items() if w not in busy and "(2 busy" not in w)
