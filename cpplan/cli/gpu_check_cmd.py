"""``cpplan gpu-check``: prove the kernels path exact and measure the cards' predictions on one GPU (or
the same steps on the CPU with ``--dry-run``), writing JSON, markdown, a calibration CSV and logs."""

from __future__ import annotations

from pathlib import Path

import click

from cpplan.cli import COMMANDS, cli
from cpplan.gpu_check.check_run import STEPS, CheckConfig, run_check
from cpplan.gpu_check.time_guard import DEFAULT_LIMIT_S


@cli.command("gpu-check", short_help=COMMANDS["gpu-check"][1])
@click.option(
    "--output",
    "output",
    required=True,
    metavar="DIR",
    type=click.Path(path_type=Path),
    help="Folder for gpu_check.json, gpu_check.md, measurements.csv and logs/ (created).",
)
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Run every step on the CPU at tiny shapes (fake memory source; for CI).",
)
@click.option(
    "--time-limit",
    "time_limit_s",
    type=float,
    default=DEFAULT_LIMIT_S,
    show_default=True,
    metavar="SECONDS",
    help="Stop measuring and write what was measured when this is about to run out.",
)
@click.option(
    "--steps",
    "steps",
    default=",".join(STEPS),
    show_default=True,
    metavar="S,...",
    help="Steps to run (a rerun of one step: --steps waves).",
)
@click.option(
    "--model",
    "model",
    default="qwen3.6-35b-a3b",
    show_default=True,
    help="Card to check (a Qwen3.5/3.6-MoE card: the waves step builds its model from the geometry).",
)
@click.option(
    "--perturb-logprob",
    "perturb_logprob",
    type=float,
    default=0.0,
    hidden=True,
    help="Self-test: add this to one packed log-prob of every exactness run (the check must fail).",
)
def gpu_check_command(
    output: Path, dry_run: bool, time_limit_s: float, steps: str, model: str, perturb_logprob: float
) -> int:
    """Prove cpplan's kernels path and measure what the card predicts, in at most --time-limit seconds
    on one GPU: (1) print versions and the GPU; (2) on tiny random Qwen3.5-MoE and Qwen3 models,
    tree-packed waves at CP 1, 2 and 4 (ranks simulated in one process) run with kernels="auto" in bf16
    and fp32 against the pure-torch path and each request alone (log-probs and gradients within the
    stated tolerances); (3) the card's model truncated to 8 layers (random weights, LoRA, bf16) on three
    CP1 waves (no sharing, a GRPO tree, a long chain), cold and warm: peak bytes above the pre-wave
    baseline and seconds against the card; then the GDN kernel and the tree flex_attention alone;
    (4) the CP terms the card takes from published figures: attention on one ring step's block at 512
    to 16K tokens, and NCCL's all-to-all against its all-gather over every GPU of the node (each skipped,
    with its reason, on the CPU or, for the all-to-all, with one GPU); (5) write the results under
    --output. Exit 1 when an exactness check fails, 70 when a step raised
    (the files are written first)."""
    config = CheckConfig(
        output=output,
        dry_run=dry_run,
        time_limit_s=time_limit_s,
        steps=tuple(s.strip() for s in steps.split(",") if s.strip()),
        card=model,
        perturb_logprob=perturb_logprob,
    )
    report, code = run_check(config, echo=lambda line: click.echo(line, err=True))
    verdict = "passed" if report["passed"] else {1: "FAILED", 70: "raised"}.get(code, "incomplete")
    click.echo(f"gpu-check {verdict}: {output}")
    return code
