"""``cpplan verify``: re-check a plan file independently."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cpplan.cli import EXIT_INVALID, cli
from cpplan.cli.options import build, dynamic_cp_option, problem_options
from cpplan.errors import InputError
from cpplan.verifier import verify_plan


@cli.command("verify")
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(path_type=Path))
@click.argument("workload", type=click.Path(path_type=Path))
@problem_options
@dynamic_cp_option
def verify_command(
    plan_file: Path,
    workload: Path,
    model: str,
    topology: str,
    memory: str,
    layers: int | None,
    phase: str,
    dynamic_cp: bool,
) -> int:
    """Check PLAN.json against WORKLOAD: exit 0 when valid, 1 listing each violation."""
    try:
        data = json.loads(plan_file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read plan: {exc.strerror}", file=str(plan_file)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", file=str(plan_file), line=exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError("a plan is a JSON object", file=str(plan_file))
    problem = build(workload, model, topology, memory, layers, phase, dynamic_cp=dynamic_cp)
    verdict = verify_plan(data, problem.workload, problem.card, problem.budget_bytes)
    if verdict.valid:
        click.echo(
            f"valid: {len(data['waves'])} wave(s), verifier's cost {verdict.cost_s:.6f} s, "
            f"peak {verdict.peak_bytes:,} bytes of {problem.budget_bytes:,}",
            err=True,
        )
        return 0
    for violation in verdict.violations:
        click.echo(f"violation: {violation}", err=True)
    click.echo(f"invalid: {len(verdict.violations)} violation(s)", err=True)
    return EXIT_INVALID
