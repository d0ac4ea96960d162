"""``cpplan bench``: baselines and cpplan side by side on the fixed suite."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cpplan.bench.runner import (
    DEFAULT_CPS,
    DEFAULT_MEMORIES,
    DEFAULT_MODEL,
    format_cpsat,
    format_headline,
    format_pivot,
    format_rows,
    run_bench,
)
from cpplan.cli import COMMANDS, cli
from cpplan.spec.units import parse_bytes

DEFAULT_FOLDER = Path("cpplan-bench")
"""Where ``cpplan bench`` saves its results unless told: a folder of the current directory."""


@cli.command("bench", short_help=COMMANDS["bench"][1])
@click.option("--quick", is_flag=True, help="A small subset (one GRPO size, two ratios, CP 1 and 4).")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, metavar="NAME|PATH", help="Model card.")
@click.option(
    "--memory",
    "memories",
    multiple=True,
    metavar="SIZE",
    help=f"Per-rank budget; repeat for several (default {' and '.join(DEFAULT_MEMORIES)}).",
)
@click.option(
    "--cp",
    "cps",
    multiple=True,
    type=click.IntRange(min=1, max=1024),
    help="CP size; repeat for several (default 1, 2, 4 and 8).",
)
@click.option(
    "--solver",
    default=None,
    metavar="NAME|PATH",
    help="cpplan's profile (default runtime; deterministic with --sensitivity, so factors compare plans, not "
    "deadlines).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    help="Timed runs per planner (default 3; 1 with --quick).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH.json",
    help="Where to save the results (default ./cpplan-bench/bench.json, or bench_quick.json with --quick; "
    "bench_dynamic_cp.json and sensitivity.json there with --dynamic-cp and --sensitivity).",
)
@click.option("--detail", is_flag=True, help="Also print every instance and planner.")
@click.option(
    "--dynamic-cp",
    "dynamic_cp",
    is_flag=True,
    help="Run the dynamic-CP suite instead: mixed lengths on a pool of 8 GPUs, dynamic against fixed CP "
    "and Megatron's dynamic CP.",
)
@click.option(
    "--sensitivity",
    is_flag=True,
    help="Scale each uncertain time constant by 1/2 and 2 and report, per workload, how cpplan's chosen "
    "plan on a pool of 8 GPUs (its step time, CP size, layouts, waves) moves.",
)
def bench_command(
    quick: bool,
    model: str,
    memories: tuple[str, ...],
    cps: tuple[int, ...],
    solver: str,
    repeats: int | None,
    output: Path | None,
    detail: bool,
    dynamic_cp: bool,
    sensitivity: bool,
) -> int:
    """Run every baseline planner and cpplan on the fixed suite; print and save the table."""
    for size in memories:
        parse_bytes(size)
    if sensitivity:
        return _sensitivity(quick, model, memories, solver or "deterministic", output)
    solver = solver or "runtime"
    if dynamic_cp:
        return _dynamic_bench(quick, model, memories, solver, output)
    if not cps:
        cps = (1, 4) if quick else DEFAULT_CPS
    if not memories:
        memories = DEFAULT_MEMORIES[:1] if quick else DEFAULT_MEMORIES

    def progress(case, cp, memory, rows) -> None:
        ours = rows[-1]
        click.echo(
            f"{case.name} cp={cp} {memory}: cpplan {ours.status} "
            f"{'-' if ours.cost_s is None else f'{ours.cost_s:.3f} s'} ({ours.strategy or 'refused'}); "
            f"baseline OOM plans {sum(r.status == 'oom' for r in rows[:-1])}",
            err=True,
        )

    result = run_bench(
        quick=quick,
        model=model,
        memories=memories,
        cps=cps,
        solver=solver,
        repeats=repeats,
        progress=progress,
    )
    path = output or DEFAULT_FOLDER / ("bench_quick.json" if quick else "bench.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    if detail:
        click.echo(format_rows(result["rows"]))
        click.echo()
        click.echo(format_cpsat(result["rows"]))
        click.echo()
    click.echo(format_pivot(result["headline"]))
    click.echo()
    click.echo(format_headline(result["headline"]))
    click.echo(f"\n{len(result['rows'])} runs in {result['wall_s']:.1f} s; saved {path}")
    return 0


def _dynamic_bench(
    quick: bool, model: str, memories: tuple[str, ...], solver: str, output: Path | None
) -> int:
    """``--dynamic-cp``: the dynamic-CP suite (:mod:`cpplan.bench.dynamic`)."""
    from cpplan.bench.dynamic import DEFAULT_MEMORIES as DYNAMIC_MEMORIES
    from cpplan.bench.dynamic import format_summary, run_dynamic_bench

    def progress(case, memory, rows) -> None:
        found = ", ".join(
            f"{r.planner} {r.status} {'-' if r.cost_s is None else f'{r.cost_s:.3f}'}" for r in rows
        )
        click.echo(f"{case.name} {memory}: {found}", err=True)

    chosen = memories or (DYNAMIC_MEMORIES[:1] if quick else DYNAMIC_MEMORIES)
    result = run_dynamic_bench(quick=quick, model=model, memories=chosen, solver=solver, progress=progress)
    path = output or DEFAULT_FOLDER / ("bench_dynamic_cp_quick.json" if quick else "bench_dynamic_cp.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    click.echo(format_summary(result["summary"]))
    click.echo(f"\n{len(result['rows'])} runs in {result['wall_s']:.1f} s; saved {path}")
    return 0


def _sensitivity(quick: bool, model: str, memories: tuple[str, ...], solver: str, output: Path | None) -> int:
    """``--sensitivity``: the chosen plan under each uncertain constant at 1/2 and 2
    (:mod:`cpplan.bench.sensitivity`)."""
    from cpplan.bench.sensitivity import format_sensitivity, run_sensitivity

    memory = memories[0] if memories else DEFAULT_MEMORIES[0]
    result = run_sensitivity(
        quick=quick,
        model=model,
        memory=memory,
        solver=solver,
        progress=lambda line: click.echo(line, err=True),
    )
    path = output or DEFAULT_FOLDER / ("sensitivity_quick.json" if quick else "sensitivity.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    click.echo(format_sensitivity(result))
    click.echo(f"\n{len(result['rows'])} plans in {result['wall_s']:.1f} s; saved {path}")
    return 0
