"""``cpplan calibrate``: fit a card's calibrated coefficients to measured peaks and write the card."""

from __future__ import annotations

from pathlib import Path

import click

from cpplan.calibration.fit import DEFAULT_MAX_RATIO, calibrate, write_card
from cpplan.calibration.measurements import GB, Measurement, read_measurements
from cpplan.calibration.online import Verdict
from cpplan.calibration.planner_state import observation_rows
from cpplan.cli import COMMANDS, cli
from cpplan.spec.card import load_model


@cli.command("calibrate", short_help=COMMANDS["calibrate"][1])
@click.argument(
    "measurements",
    metavar="MEASUREMENTS.csv|STATE.jsonl...",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path),
)
@click.option("--model", "model", required=True, metavar="NAME|PATH", help="Card to calibrate.")
@click.option(
    "--output",
    "-o",
    "output",
    required=True,
    metavar="CARD.toml",
    type=click.Path(path_type=Path),
    help="Where to write the calibrated card.",
)
@click.option(
    "--fit",
    "fit",
    multiple=True,
    metavar="NAME",
    help="Coefficient to fit (repeatable); default: every coefficient in the card's [calibration].",
)
@click.option(
    "--max-ratio",
    "max_ratio",
    type=float,
    default=DEFAULT_MAX_RATIO,
    show_default=True,
    help="Refuse the fit when a row is predicted above this multiple of its observed maximum.",
)
@click.option("--date", "date", default=None, metavar="ISO-8601", help="Provenance date (default: now, UTC).")
def calibrate_command(
    measurements: tuple[Path, ...],
    model: str,
    output: Path,
    fit: tuple[str, ...],
    max_ratio: float,
    date: str | None,
) -> int:
    """Fit the card's calibrated coefficients to measured peaks as a safe upper envelope (a linear
    program: every row predicted at or above its observed maximum, total over-prediction minimized,
    coefficients non-negative), print predicted/observed per row and write the card to --output.

    Each file is a measurements CSV (`cpplan measure` writes one) or a saved planner state
    (`Planner.save`): each of its peak observations its trust window believed is a row priced on the
    observed wave's quantities on that rank; the rejected ones are listed and left out."""
    card = load_model(model)
    rows, rejected = _read_rows(measurements)
    source = ", ".join(str(m) for m in measurements)
    result = calibrate(card, rows, source=source, fit=fit or None, max_ratio=max_ratio, date=date)
    written = write_card(result, output)
    header = (
        "line",
        "layers",
        "topology",
        "phase",
        "tokens",
        "observed max GB",
        "predicted GB",
        "ratio",
        "binds",
    )
    table = [header]
    for r in result.rows:
        table.append(
            (
                f"{Path(r.row.file).name}:{r.row.line}" if r.row.quantities is not None else str(r.row.line),
                str(r.row.layers),
                _short(r.row.topology),
                r.row.phase,
                f"{r.row.total_tokens:,}",
                f"{r.row.observed_max_bytes / GB:.2f}",
                f"{r.predicted_bytes / GB:.2f}",
                f"{r.ratio:.3f}",
                f"rank {r.rank} {r.envelope}",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    click.echo(f"calibrated {written.name} on {len(result.rows)} row(s) of {source}")
    for row in table:
        click.echo("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    for name in written.calibration.fitted:
        click.echo(f"{name} = {written.calibration.coefficients[name]:g}")
    for skipped in result.skipped:
        click.echo(f"skipped line {skipped.line}: model {skipped.model!r} is not {written.name!r}")
    for merged in result.merged:
        click.echo(f"merged line {merged.line} into a repeat of the same conditions with a larger maximum")
    for file, verdict in rejected:
        click.echo(f"left out {file}: {verdict.describe()}")
    click.echo(f"wrote {output}")
    return 0


def _read_rows(paths: tuple[Path, ...]) -> tuple[list[Measurement], list[tuple[Path, Verdict]]]:
    """Every file's rows (a CSV's, or a planner state's believed observations) and the rejected ones."""
    rows: list[Measurement] = []
    rejected: list[tuple[Path, Verdict]] = []
    for path in paths:
        if _is_planner_state(path):
            _, observed, left_out = observation_rows(path)
            rows += observed
            rejected += [(path, v) for v in left_out]
        else:
            rows += read_measurements(path)
    return rows, rejected


def _is_planner_state(path: Path) -> bool:
    """Whether ``path`` is a planner state (JSON lines) rather than a CSV: its first line is an object."""
    try:
        with path.open(encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip() and not line.startswith("#")), "")
    except OSError:
        return False
    return first.lstrip().startswith("{")


def _short(topology) -> str:
    sizes = [f"{axis}={int(size)}" for axis, size in topology.as_env().items() if size != 1]
    return ",".join(sizes) or "single rank"
