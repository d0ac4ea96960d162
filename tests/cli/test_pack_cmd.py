"""``cpplan pack`` and ``cpplan report`` exit codes that tell the truth, and ``cpplan bench``'s output
folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpplan.cli import main
from tests.support import pack_data as tp


def _pack(tmp_path: Path, data: Path) -> list[str]:
    """The `cpplan pack` arguments of these tests (output in tmp_path/out)."""
    solver = str(tp.profile_path(tmp_path))
    return ["pack", str(data), *tp.CLI_SETTINGS, "--output", str(tmp_path / "out"), "--solver", solver]


def test_pack_planning_no_item_exits_3_with_the_commonest_reasons(tmp_path, capsys):
    """A dataset whose every item is rejected exits 3 (not 0), naming the rejects file and the commonest
    reasons with a count and an example line each."""
    data = tmp_path / "bad.jsonl"
    lines = [json.dumps({"id": f"x{k}", "tokens": [1, -k - 1]}) for k in range(5)]
    lines += ["{not json"] * 2 + [json.dumps(tp.HUGE)]
    data.write_text("\n".join(lines) + "\n")
    assert main(_pack(tmp_path, data)) == 3
    captured = capsys.readouterr()
    assert "items_planned 0 + items_rejected 8" in captured.out
    err = captured.err
    assert "nothing fits: no item of" in err and str(tmp_path / "out" / "rejects.jsonl") in err
    assert "5 x input, e.g. line 1:" in err and "outside [0, 2147483647]" in err
    assert "2 x input, e.g. line 6:" in err and "1 x no_fit, e.g. line 8:" in err


def test_pack_with_some_rejects_exits_0_and_says_where_the_reasons_are(tmp_path, capsys):
    """Some rejected items: exit 0, with their count, their fraction and the rejects file on the last
    line of standard error."""
    data, kinds = tp.write_dataset(tmp_path)
    assert main([*_pack(tmp_path, data), "--quiet"]) == 0
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    num_in = len(kinds) + len(tp.workload_lines())
    assert f"{len(kinds)} of {num_in} items ({len(kinds) / num_in:.1%}) were rejected" in last
    assert str(tmp_path / "out" / "rejects.jsonl") in err


def test_pack_of_an_empty_dataset_is_bad_input(tmp_path, capsys):
    """A dataset without a single record exits 2."""
    data = tmp_path / "empty.jsonl"
    data.write_text("\n\n")
    assert main(_pack(tmp_path, data)) == 2
    assert "holds no item" in capsys.readouterr().err


def test_report_on_an_empty_pack_warns(tmp_path, capsys):
    """`cpplan report` on a pack that planned nothing still writes the page, but warns on standard error
    and at the top of the page."""
    pytest.importorskip("matplotlib")
    data = tmp_path / "bad.jsonl"
    data.write_text("{not json\n")
    assert main(_pack(tmp_path, data)) == 3
    capsys.readouterr()
    assert main(["report", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "warning: the pack planned no item (1 rejected" in err
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert 'class="warning">warning: the pack planned no item' in page


def test_report_shows_the_topology_as_text(tmp_path, capsys):
    """The report names the topology as `cp=2`, not as a Python dict."""
    pytest.importorskip("matplotlib")
    data, _ = tp.write_dataset(tmp_path)
    assert main([*_pack(tmp_path, data), "--quiet"]) == 0
    assert main(["report", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert "qwen3.6-35b-a3b, cp=2" in page and "{" not in page.split("<table>")[1].split("</table>")[0]


def test_bench_writes_under_the_current_directory_by_default(tmp_path, monkeypatch, capsys):
    """Without --output, `cpplan bench --quick` saves ./cpplan-bench/bench_quick.json in the current
    directory (never into the source tree's benchmarks/)."""
    from cpplan.cli import bench_cmd

    result = {"rows": [], "headline": [], "wall_s": 0.0}
    monkeypatch.setattr(bench_cmd, "run_bench", lambda **kwargs: result)
    monkeypatch.setattr(bench_cmd, "format_pivot", lambda headline: "")
    monkeypatch.setattr(bench_cmd, "format_headline", lambda headline: "")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick"]) == 0
    assert json.loads((tmp_path / "cpplan-bench" / "bench_quick.json").read_text()) == result
    assert "saved cpplan-bench/bench_quick.json" in capsys.readouterr().out


def test_report_wave_axes_have_whole_ticks(tmp_path, monkeypatch):
    """Every plot of the report numbers its waves and windows with whole ticks (no wave 0.5)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from cpplan.pack.report import WaveSeries, _plots

    ticks: list[float] = []
    original = Figure.savefig

    def recording(fig, *args, **kwargs):
        fig.canvas.draw()
        ticks.extend(t for ax in fig.axes for t in ax.get_xticks())
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    series = WaveSeries(
        packed_tokens=[10, 20, 30],
        logical_tokens=[20, 30, 40],
        cost_s=[1.0, 2.0, 1.5],
        rank_peaks=[[5, 6]] * 3,
    )
    window = {"logical_tokens": 5, "packed_tokens": 3, "baseline": {"packed_tokens": 5}}
    _plots(series, [window, window], memory_bytes=10, target=tmp_path)
    assert ticks and all(float(t).is_integer() for t in ticks)
