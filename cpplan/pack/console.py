"""What a packing run shows: a progress bar on a terminal, and the end summary beside the baseline."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from cpplan.spec.units import format_bytes


def imbalance(figures: dict[str, Any]) -> float | None:
    """Rank imbalance over a pack: the busiest rank's local tokens over the mean, summed over waves."""
    mean = figures["mean_local_tokens"]
    return figures["max_local_tokens"] / mean if mean > 0 else None


class PackProgress:
    """A rich progress bar on standard error (items, tokens, waves, rate, ETA); silent when it is not a
    terminal or when ``enabled`` is false."""

    def __init__(self, *, total: int, start: int, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started = time.perf_counter()
        self.items_at_start: int | None = None
        self.progress: Progress | None = None
        if not self.enabled:
            return
        self.progress = Progress(
            TextColumn("packing"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn(
                "{task.fields[items]} items · {task.fields[tokens]} tokens · {task.fields[waves]} waves"
            ),
            TextColumn("· {task.fields[rate]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.progress.add_task("pack", total=max(total, 1), completed=start, **self._fields(None))
        self.progress.start()

    def _fields(self, manifest: dict[str, Any] | None) -> dict[str, str]:
        if manifest is None:
            return {"items": "0", "tokens": "0", "waves": "0", "rate": "- items/s"}
        if self.items_at_start is None:
            self.items_at_start = 0
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        rate = (manifest["items_in"] - self.items_at_start) / elapsed
        return {
            "items": f"{manifest['items_in']:,}",
            "tokens": f"{manifest['logical_tokens']:,}",
            "waves": f"{manifest['waves']:,}",
            "rate": f"{rate:,.0f} items/s",
        }

    def begin(self, manifest: dict[str, Any]) -> None:
        """Note the items already done by an earlier run (they do not count towards the rate)."""
        self.items_at_start = manifest["items_in"]

    def update(self, position: int, manifest: dict[str, Any]) -> None:
        """Advance to ``position`` on the input-size scale."""
        if self.progress is not None:
            self.progress.update(self.task, completed=position, **self._fields(manifest))

    def close(self) -> None:
        """Remove the bar."""
        if self.progress is not None:
            self.progress.stop()


def print_pack_summary(manifest: dict[str, Any], run: dict[str, Any], console: Console | None = None) -> None:
    """Totals, then packed vs logical tokens, waves, predicted seconds and imbalance beside the
    no-sharing greedy baseline."""
    console = console or Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    base = manifest["baseline"]
    config = manifest["config"]
    console.print(
        f"items: {manifest['items_in']:,} in = {manifest['items_planned']:,} planned + "
        f"{manifest['items_rejected']:,} rejected"
        + (" (see rejects.jsonl)" if manifest["items_rejected"] else "")
    )
    table = Table(
        title=f"cpplan pack: {config['model']}, {topology_text(config['topology'])}, budget "
        f"{format_bytes(config['memory_bytes'])}, profile {config['solver']}",
        title_justify="left",
    )
    for column in ("", "planned", "no-sharing greedy baseline", "ratio"):
        table.add_column(column, justify="left" if not column else "right")

    def row(name: str, ours: float, theirs: float, fmt: str) -> None:
        ratio = f"{ours / theirs:.3f}" if theirs else "-"
        table.add_row(name, format(ours, fmt), format(theirs, fmt), ratio)

    row("logical tokens", manifest["logical_tokens"], base["logical_tokens"], ",")
    row("packed tokens", manifest["packed_tokens"], base["packed_tokens"], ",")
    row("waves", manifest["waves"], base["waves"], ",")
    row("predicted seconds", manifest["cost_s"], base["cost_s"], ",.2f")
    ours, theirs = imbalance(manifest), imbalance(base)
    table.add_row(
        "rank imbalance (max/mean local tokens)",
        "-" if ours is None else f"{ours:.3f}",
        "-" if theirs is None else f"{theirs:.3f}",
        "",
    )
    console.print(table)
    if base["items_unplaced"]:
        console.print(f"baseline could not place {base['items_unplaced']:,} item(s) without sharing")
    saved = manifest["logical_tokens"] - manifest["packed_tokens"]
    share = saved / manifest["logical_tokens"] if manifest["logical_tokens"] else 0.0
    console.print(
        f"sharing saves {saved:,} tokens ({share:.1%}); largest rank peak "
        f"{format_bytes(manifest['peak_bytes'])} of {format_bytes(config['memory_bytes'])}"
    )
    console.print(
        f"wall {run['wall_s']:.1f} s ({run['engine']}, {run['workers']} worker(s)): "
        f"{run['items_per_s']:,.0f} items/s, {run['tokens_per_s']:,.0f} logical tokens/s"
        + (f"; resumed after {run['resumed_windows']} window(s)" if run["resumed_windows"] else "")
    )


def topology_text(data: dict[str, int]) -> str:
    """A topology from the manifest as ``cp=4`` (sizes of 1 left out; ``single rank`` when all are 1)."""
    return ",".join(f"{k}={v}" for k, v in data.items() if v != 1) or "single rank"
