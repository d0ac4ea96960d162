"""``cpplan plan``: plan a workload and write the plan JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from cpplan.cli import COMMANDS, cli
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

CLI_SOLVER = "deterministic"
"""The profile ``cpplan plan`` uses unless told: CP-SAT bounded by its deterministic work counter and
no wall-clock deadline, so a command gives the same plan on a quiet and a busy machine (a trainer's
:class:`cpplan.Planner` keeps ``runtime``, a per-step wall-clock budget)."""


@cli.command("plan", short_help=COMMANDS["plan"][1])
@click.argument("workload", type=click.Path(path_type=Path))
@problem_options()
@record_options
@click.option(
    "--solver",
    "solver",
    default=CLI_SOLVER,
    show_default=True,
    metavar="NAME|PATH",
    help="Solver profile: deterministic (the same plan on a quiet or a busy machine), runtime (what a "
    "trainer's Planner uses: 0.1 s of wall-clock time, so load can cut its search), offline, or a "
    "TOML path.",
)
@click.option(
    "--time-budget",
    "time_budget",
    type=float,
    default=None,
    metavar="SECONDS",
    help=(
        "Override the profile's budget: wall-clock seconds, or, under a deterministic profile (the "
        "default), a scale in CP-SAT's deterministic time (each CP-SAT run's limit is its stage's "
        "`share` of it; not a cap on the call's work)."
    ),
)
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PLAN.json",
    help="Write the plan JSON here (default: standard output).",
)
@click.option("--quiet", is_flag=True, help="No summary table on standard error.")
def plan_command(
    workload: Path, solver: str, time_budget: float | None, output: Path | None, quiet: bool, **options: Any
) -> int:
    """Plan WORKLOAD (JSONL, one item a line: {"id", "tokens"}, {"id", "requests"} or Hugging Face
    {"input_ids", "labels"}; `-` reads standard input) into verified waves. Exit 0 with a plan, 2 on
    bad input, 3 when nothing fits (with what would: a --memory at this topology and a larger CP size,
    each checked by planning the whole workload)."""
    from cpplan.api import solve
    from cpplan.cli.idle_ranks import idle_ranks_warning
    from cpplan.cli.no_fit import with_suggestions
    from cpplan.cli.plan_table import print_summary
    from cpplan.plans.plan_writer import dumps
    from cpplan.pricing.problem import Problem
    from cpplan.spec.profile import load_solver
    from cpplan.spec.workload import Workload

    _check_output(output)
    problem_values = split_options(options, PROBLEM_KEYS)
    fields = record_fields(split_options(options, RECORD_KEYS))
    profile = load_solver(solver).with_time_budget(time_budget)
    settings = read_settings(problem_values)
    problem = Problem.build(Workload.from_jsonl(workload, fields=fields), settings)
    try:
        result = solve(problem, profile)
    except NoFitError as exc:
        raise with_suggestions(exc, problem, profile) from None
    text = dumps(result.to_dict())
    if output is None:
        sys.stdout.write(text)
    else:
        _write(output, text)
    warning = idle_ranks_warning(result)
    if warning:
        click.echo(warning, err=True)
    if not quiet:
        print_summary(result)
    return 0


def _check_output(output: Path | None) -> None:
    if output is not None and (output.is_dir() or not output.parent.is_dir()):
        why = "is a directory" if output.is_dir() else "its directory does not exist"
        raise InputError(f"cannot write the plan here: {why}", file=str(output), field="output")


def _write(output: Path, text: str) -> None:
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(output)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write the plan: {exc.strerror}", file=str(output), field="output") from None
