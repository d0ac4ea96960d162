"""``cpplan report``: HTML and PNG plots of a pack folder."""

from __future__ import annotations

from pathlib import Path

import click

from cpplan.cli import COMMANDS, cli


@cli.command("report", short_help=COMMANDS["report"][1])
@click.argument("outdir", type=click.Path(path_type=Path))
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help="Where to write index.html and the plots (default: OUTDIR/report).",
)
def report_command(outdir: Path, output: Path | None) -> int:
    """Write a report of the pack in OUTDIR: packed tokens, rank peaks against the budget, seconds per
    wave and tokens saved by sharing."""
    from cpplan.errors import InputError
    from cpplan.pack.outdir import read_manifest
    from cpplan.pack.report import report_warnings, write_report

    if outdir.is_file():
        raise InputError(f"report reads a pack folder (the --output DIR of cpplan pack); {outdir} is a file")
    path = write_report(outdir, output)
    for warning in report_warnings(outdir, read_manifest(outdir)):
        click.echo(f"cpplan: warning: {warning}", err=True)
    click.echo(str(path))
    return 0
