"""``cpplan plan``: plan a workload and write the plan JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cpplan.api import solve
from cpplan.cli import cli
from cpplan.cli.options import build, dynamic_cp_option, problem_options
from cpplan.cli.plan_table import print_summary
from cpplan.errors import InputError
from cpplan.pricing.serialize import dumps, result_to_dict
from cpplan.spec.profile import load_solver


@cli.command("plan")
@click.argument("workload", type=click.Path(path_type=Path))
@problem_options
@dynamic_cp_option
@click.option(
    "--solver",
    "solver",
    default="runtime",
    show_default=True,
    metavar="NAME|PATH",
    help="Solver profile: runtime, offline, deterministic or a TOML path.",
)
@click.option(
    "--time-budget",
    "time_budget",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Override the profile's time budget.",
)
@click.option(
    "--output",
    "output",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PLAN.json",
    help="Write the plan JSON here (default: standard output).",
)
@click.option("--quiet", is_flag=True, help="No summary table on standard error.")
def plan_command(
    workload: Path,
    model: str,
    topology: str,
    memory: str,
    layers: int | None,
    phase: str,
    dynamic_cp: bool,
    solver: str,
    time_budget: float | None,
    output: Path | None,
    quiet: bool,
) -> int:
    """Plan WORKLOAD (JSONL, one item a line) into verified waves."""
    if output is not None and (output.is_dir() or not output.parent.is_dir()):
        why = "is a directory" if output.is_dir() else "its directory does not exist"
        raise InputError(f"cannot write the plan here: {why}", file=str(output), field="output")
    profile = load_solver(solver).with_time_budget(time_budget)
    problem = build(workload, model, topology, memory, layers, phase, dynamic_cp=dynamic_cp)
    result = solve(problem, profile)
    text = dumps(result_to_dict(result))
    if output is None:
        sys.stdout.write(text)
    else:
        tmp = output.with_name(output.name + ".tmp")
        try:
            tmp.write_text(text)
            tmp.replace(output)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise InputError(
                f"cannot write the plan: {exc.strerror}", file=str(output), field="output"
            ) from None
    if not quiet:
        print_summary(result)
    return 0
