"""``benchmarks/bench_planners.py --quick`` leaves the committed results that docs/cpsat.md cites alone."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench_planners():
    """The benchmark script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_planners", ROOT / "benchmarks" / "bench_planners.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_quick_run_writes_beside_the_current_directory_not_over_the_committed_results(
    tmp_path, monkeypatch, capsys
):
    """`--quick` without `--output` writes ./cpplan-bench/bench_planners_quick.json and leaves
    benchmarks/results/bench_planners.json byte for byte; `--quick --output PATH` writes PATH; a full
    run's default is still the committed file. (The workloads are emptied: the paths are under test.)"""
    bench = _bench_planners()
    monkeypatch.setattr(bench, "quality_workloads", dict)
    monkeypatch.setattr(bench, "run_latency", lambda runs, budget_s: [])
    monkeypatch.chdir(tmp_path)
    committed = bench.RESULTS.read_bytes()
    bench.main(["--quick"])
    written = tmp_path / "cpplan-bench" / "bench_planners_quick.json"
    assert json.loads(written.read_text())["quick"] is True
    assert bench.RESULTS.read_bytes() == committed
    bench.main(["--quick", "--output", str(tmp_path / "asked.json")])
    assert json.loads((tmp_path / "asked.json").read_text())["quick"] is True
    assert bench.output_path(quick=False, output=None) == bench.RESULTS
    assert bench.RESULTS.read_bytes() == committed
    capsys.readouterr()
