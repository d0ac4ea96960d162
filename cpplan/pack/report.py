"""``cpplan report``: an HTML page with matplotlib plots of a pack folder.

Plots: packed tokens per wave, every rank's predicted peak per wave against the budget, predicted
seconds per wave, and tokens saved by sharing (logical, packed, and the no-sharing baseline). The
shards are read one wave at a time; only a few numbers per wave are kept.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cpplan.errors import InputError
from cpplan.pack.console import imbalance, topology_text
from cpplan.pack.outdir import REJECTS, WINDOWS, read_manifest, shard_name
from cpplan.spec.units import format_bytes

PLOTS = ("packed_tokens", "rank_peaks", "seconds", "sharing")


@dataclass(kw_only=True)
class WaveSeries:
    """Per-wave figures read from the shards."""

    packed_tokens: list[int] = field(default_factory=list)
    logical_tokens: list[int] = field(default_factory=list)
    cost_s: list[float] = field(default_factory=list)
    rank_peaks: list[list[int]] = field(default_factory=list)
    window_of_wave: list[int] = field(default_factory=list)


def read_waves(folder: Path, num_windows: int) -> WaveSeries:
    """Stream every shard of the pack and keep a few figures per wave."""
    series = WaveSeries()
    for index in range(num_windows):
        path = folder / shard_name(index)
        try:
            handle = path.open(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"missing shard: {exc.strerror}", file=str(path)) from None
        with handle:
            for line_no, line in enumerate(handle, start=1):
                try:
                    wave = json.loads(line)["waves"][0]
                    peaks = [int(rank["peak_bytes"]) for rank in wave["ranks"]]
                    series.packed_tokens.append(int(wave["packed_tokens"]))
                    series.logical_tokens.append(int(wave["logical_tokens"]))
                    series.cost_s.append(float(wave["cost_s"]))
                except (KeyError, TypeError, ValueError, IndexError) as exc:
                    raise InputError(f"not a wave record: {exc}", file=str(path), line=line_no) from None
                series.rank_peaks.append(peaks)
                series.window_of_wave.append(index)
    return series


def _windows(folder: Path) -> list[dict[str, Any]]:
    path = folder / WINDOWS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InputError("cpplan report needs matplotlib: pip install 'cpplan[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plots(
    series: WaveSeries, windows: list[dict[str, Any]], memory_bytes: int, target: Path
) -> dict[str, str]:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    waves = np.arange(len(series.packed_tokens))
    files: dict[str, str] = {}

    def save(fig, name: str) -> None:
        for ax in fig.axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # wave and window numbers are whole
        fig.tight_layout()
        fig.savefig(target / f"{name}.png", dpi=110)
        plt.close(fig)
        files[name] = f"{name}.png"

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar(waves, series.packed_tokens, width=1.0, color="#4c72b0", label="packed")
    ax.plot(waves, series.logical_tokens, ".", color="#dd8452", markersize=3, label="logical")
    ax.set(xlabel="wave", ylabel="tokens", title="Packed tokens per wave")
    ax.legend()
    save(fig, "packed_tokens")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    peaks = np.zeros((len(series.rank_peaks), max((len(p) for p in series.rank_peaks), default=1)))
    for w, p in enumerate(series.rank_peaks):
        peaks[w, : len(p)] = p
    for rank in range(peaks.shape[1]):
        ax.plot(waves, peaks[:, rank] / 2**30, ".", markersize=3, label=f"rank {rank}")
    ax.axhline(memory_bytes / 2**30, color="#c44e52", linestyle="--", label="budget")
    ax.set_ylim(bottom=0)  # from zero: a cropped axis makes a few percent look like a cliff
    ax.set(xlabel="wave", ylabel="GiB (axis from 0)", title="Predicted peak per rank against the budget")
    ax.legend(fontsize="small", ncol=min(peaks.shape[1] + 1, 6))
    save(fig, "rank_peaks")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar(waves, series.cost_s, width=1.0, color="#55a868")
    ax.set(xlabel="wave", ylabel="seconds", title="Predicted seconds per wave")
    save(fig, "seconds")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    _sharing_plot(ax, windows)
    save(fig, "sharing")
    return files


def _sharing_plot(ax, windows: list[dict[str, Any]]) -> None:
    """Cumulative logical, no-sharing and planned packed tokens per window; with one window (a line of
    one point draws nothing) the three totals as bars, with the share saved written on them."""
    logical = np.cumsum([w["logical_tokens"] for w in windows])
    packed = np.cumsum([w["packed_tokens"] for w in windows])
    baseline = np.cumsum([w["baseline"]["packed_tokens"] for w in windows])
    if len(windows) <= 1:
        totals = [int(v[-1]) if len(v) else 0 for v in (logical, baseline, packed)]
        names = ["logical", "no-sharing baseline, packed", "planned, packed"]
        ax.bar(names, totals, color=["#4c72b0", "#dd8452", "#55a868"])
        saved = 1 - totals[2] / totals[0] if totals[0] else 0.0
        ax.set(ylabel="tokens", title=f"Tokens saved by sharing (one window: {saved:.1%} of logical saved)")
        for x, value in enumerate(totals):
            ax.annotate(f"{value:,}", (x, value), ha="center", va="bottom")
        return
    idx = np.arange(len(windows))
    ax.plot(idx, logical, label="logical")
    ax.plot(idx, baseline, label="no-sharing baseline, packed")
    ax.plot(idx, packed, label="planned, packed")
    ax.fill_between(idx, packed, logical, alpha=0.2, label="saved by sharing")
    ax.set(xlabel="window", ylabel="tokens (cumulative)", title="Tokens saved by sharing")
    ax.legend()


def _row(name: str, value: str) -> str:
    return f"<tr><th>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"


def report_warnings(folder: Path, manifest: dict[str, Any]) -> list[str]:
    """What a reader of the report must know first: a pack that planned nothing, or one not finished."""
    found = []
    if manifest["items_planned"] == 0:
        found.append(
            f"the pack planned no item ({manifest['items_rejected']:,} rejected; the reasons are in "
            f"{folder / REJECTS}): the plots are empty"
        )
    if not manifest["complete"]:
        found.append("the pack is not finished: rerun the same `cpplan pack` command to complete it")
    return found


def write_report(folder: str | Path, output: str | Path | None = None) -> Path:
    """Write ``index.html`` and its PNG plots for the pack in ``folder``; return the HTML path (the
    page opens with :func:`report_warnings`)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    target = Path(output) if output is not None else folder / "report"
    target.mkdir(parents=True, exist_ok=True)
    series = read_waves(folder, int(manifest["windows"]))
    windows = _windows(folder)
    config = manifest["config"]
    memory_bytes = int(config["memory_bytes"])
    files = _plots(series, windows, memory_bytes, target)
    base = manifest["baseline"]
    saved = manifest["logical_tokens"] - manifest["packed_tokens"]
    ours, theirs = imbalance(manifest), imbalance(base)
    rows = [
        _row("dataset", str(manifest["dataset"])),
        _row("model / topology", f"{config['model']}, {topology_text(config['topology'])}"),
        _row("budget per rank", format_bytes(memory_bytes)),
        _row("solver profile", str(config["solver"])),
        _row("complete", "yes" if manifest["complete"] else "no (partial pack)"),
        _row(
            "items",
            f"{manifest['items_in']:,} in = {manifest['items_planned']:,} planned + "
            f"{manifest['items_rejected']:,} rejected",
        ),
        _row("waves (baseline)", f"{manifest['waves']:,} ({base['waves']:,})"),
        _row("logical tokens", f"{manifest['logical_tokens']:,}"),
        _row("packed tokens (baseline)", f"{manifest['packed_tokens']:,} ({base['packed_tokens']:,})"),
        _row("tokens saved by sharing", f"{saved:,}"),
        _row("predicted seconds (baseline)", f"{manifest['cost_s']:,.2f} ({base['cost_s']:,.2f})"),
        _row(
            "rank imbalance (baseline)",
            f"{'-' if ours is None else f'{ours:.3f}'} ({'-' if theirs is None else f'{theirs:.3f}'})",
        ),
        _row("largest rank peak", f"{format_bytes(manifest['peak_bytes'])} of {format_bytes(memory_bytes)}"),
    ]
    images = "\n".join(
        f'<figure><img src="{html.escape(files[name])}" alt="{html.escape(name)}"></figure>' for name in PLOTS
    )
    warnings = "".join(
        f'<p class="warning">warning: {html.escape(text)}</p>\n' for text in report_warnings(folder, manifest)
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>cpplan pack report</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}th{{text-align:left;padding-right:2em}}
img{{max-width:100%}}.warning{{color:#b00;font-weight:bold}}</style></head>
<body><h1>cpplan pack report</h1>
{warnings}<table>
{chr(10).join(rows)}
</table>
{images}
</body></html>
"""
    path = target / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
