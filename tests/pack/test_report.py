"""`cpplan report OUTDIR`: an HTML page with the four matplotlib plots of a pack."""

from __future__ import annotations

import re

import pytest

from cpplan.cli import main
from cpplan.pack import pack
from cpplan.pack.report import PLOTS, read_waves, write_report
from tests.support import pack_data as tp

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_report_writes_html_with_every_plot(tmp_path, capsys):
    """`cpplan report` exits 0 and writes index.html linking a real PNG for packed tokens per wave, rank
    peaks against the budget, seconds per wave and tokens saved by sharing, plus the pack's totals."""
    data, _ = tp.write_dataset(tmp_path)
    out = tmp_path / "out"
    outcome = pack(data, output=out, solver=tp.profile_path(tmp_path), window=8, **tp.SETTINGS)
    assert main(["report", str(out)]) == 0
    page_path = out / "report" / "index.html"
    assert str(page_path) in capsys.readouterr().out
    page = page_path.read_text()
    linked = re.findall(r'<img src="([^"]+)"', page)
    assert linked == [f"{name}.png" for name in PLOTS]
    for name in linked:
        png = (out / "report" / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 5_000
    manifest = outcome.manifest
    assert f"{manifest['items_in']:,} in = {manifest['items_planned']:,} planned" in page
    assert f"{manifest['packed_tokens']:,} ({manifest['baseline']['packed_tokens']:,})" in page


def test_report_reads_every_wave_with_every_rank(tmp_path):
    """The plotted series hold one entry per wave of the pack and one peak per CP rank, all within the
    budget."""
    data, _ = tp.write_dataset(tmp_path)
    out = tmp_path / "out"
    manifest = pack(data, output=out, solver=tp.profile_path(tmp_path), window=8, **tp.SETTINGS).manifest
    series = read_waves(out, manifest["windows"])
    assert len(series.packed_tokens) == manifest["waves"]
    assert sum(series.packed_tokens) == manifest["packed_tokens"]
    assert all(len(p) == 2 and max(p) <= manifest["config"]["memory_bytes"] for p in series.rank_peaks)
    assert write_report(out, tmp_path / "elsewhere").parent == tmp_path / "elsewhere"


def test_report_on_a_folder_without_a_pack_exits_2(tmp_path, capsys):
    """A folder with no manifest is bad input (exit 2), not a traceback."""
    assert main(["report", str(tmp_path)]) == 2
    assert "not a cpplan pack folder" in capsys.readouterr().err


def _figures(monkeypatch, tmp_path, window: int) -> dict[str, object]:
    """Pack the test dataset with ``window`` items a window and report it, keeping every figure the
    report drew (by the title of its first axis)."""
    import matplotlib.pyplot as plt

    kept: dict[str, object] = {}
    real_close = plt.close

    def keep(fig=None):
        if fig is not None and fig.axes:
            kept[fig.axes[0].get_title()] = fig
        return real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    data, _ = tp.write_dataset(tmp_path)
    out = tmp_path / "out"
    pack(data, output=out, solver=tp.profile_path(tmp_path), window=window, **tp.SETTINGS)
    write_report(out)
    return kept


def test_a_one_window_pack_draws_its_sharing_as_bars(tmp_path, monkeypatch):
    """With a single window the sharing plot is not an empty axis: three bars (logical, no-sharing
    baseline, planned) and the share saved in the title."""
    figures = _figures(monkeypatch, tmp_path, window=10_000)
    (title,) = [t for t in figures if t.startswith("Tokens saved by sharing")]
    assert "one window:" in title and "% of logical saved" in title
    ax = figures[title].axes[0]
    heights = [patch.get_height() for patch in ax.patches]
    assert len(heights) == 3 and heights[0] >= heights[2] > 0


def test_the_rank_peak_axis_starts_at_zero(tmp_path, monkeypatch):
    """The rank-peak plot's y-axis starts at 0 GiB (a cropped axis exaggerates small differences)."""
    figures = _figures(monkeypatch, tmp_path, window=8)
    ax = figures["Predicted peak per rank against the budget"].axes[0]
    assert ax.get_ylim()[0] == 0
