"""``cpplan verify``: re-check a plan file, a pack shard or a whole pack folder independently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cpplan.cli import COMMANDS, EXIT_INVALID, cli
from cpplan.cli.options import (
    PROBLEM_KEYS,
    RECORD_KEYS,
    problem_options,
    read_settings,
    record_fields,
    record_options,
    split_options,
)
from cpplan.errors import InputError


@cli.command("verify", short_help=COMMANDS["verify"][1])
@click.argument("plan_file", metavar="PLAN", type=click.Path(path_type=Path))
@click.argument("workload", required=False, type=click.Path(path_type=Path))
@problem_options(from_plan=True)
@record_options
@click.option(
    "--learned",
    "learned",
    type=click.Path(path_type=Path),
    default=None,
    metavar="STATE.jsonl",
    help="A saved planner state (Planner.save): verify against its learned correction "
    "(default: the correction the plan records).",
)
def verify_command(plan_file: Path, workload: Path | None, learned: Path | None, **options: Any) -> int:
    """Check PLAN against WORKLOAD: exit 0 when valid, 1 listing each violation, 2 when WORKLOAD is not
    the workload PLAN was made for.

    PLAN is a plan JSON (`cpplan plan --output`), a pack shard (one line or a whole
    shards/window-NNNNNN.jsonl file) or a pack folder (or its manifest.json; WORKLOAD then defaults to
    the pack's dataset). The model, topology, memory, layers and phase default to the plan's own. A plan
    priced with a learned correction is checked against it (from --learned, else from the plan)."""
    problem_values = split_options(options, PROBLEM_KEYS)
    fields = record_fields(split_options(options, RECORD_KEYS))
    if plan_file.is_dir() or plan_file.name == "manifest.json":
        folder = plan_file if plan_file.is_dir() else plan_file.parent
        return _verify_pack(folder, workload, problem_values, learned)
    if workload is None:
        raise InputError("missing: give the WORKLOAD the plan was made for", field="workload")
    from cpplan.plans.plan_reader import read_plan_file

    data = read_plan_file(plan_file)
    if not isinstance(data, dict):
        raise InputError("a plan is a JSON object", file=str(plan_file))
    settings = _learned(data, read_settings(problem_values, data), learned, plan_file)
    verdict = _verify_one(data, _workload(data, workload, fields), settings)
    return _report(verdict, len(data.get("waves") or []), settings.memory_bytes)


def _learned(data: dict[str, Any], settings, learned: Path | None, plan_file: Path):
    """The settings corrected as the plan was priced (see
    :func:`cpplan.calibration.planner_state.settings_for_plan`)."""
    from cpplan.calibration.planner_state import settings_for_plan

    return settings_for_plan(data, settings, learned=learned, file=str(plan_file))


def _workload(data: dict[str, Any], path: Path, fields):
    """The workload a plan is checked against: a pack shard's window read back from the dataset, or
    the JSONL workload file."""
    from cpplan.spec.workload import Workload

    if isinstance(data.get("pack"), dict):
        from cpplan.pack.window_items import window_workload

        waves = data.get("waves") if isinstance(data.get("waves"), list) else []
        ids = [i for w in waves if isinstance(w, dict) for i in w.get("items", []) if isinstance(i, str)]
        return window_workload(path, data["pack"], ids)
    return Workload.from_jsonl(path, fields=fields)


def _verify_one(data: dict[str, Any], workload, settings):
    """The verifier's verdict on one plan, after the check that it was made for ``workload`` (a pack
    shard must hold exactly the requests it lists)."""
    from cpplan.plans.plan_reader import check_plan_workload
    from cpplan.verifier import verify_plan

    part = isinstance(data.get("pack"), dict)
    check_plan_workload(data, workload, part=part)
    held = None
    if part:
        waves = [w for w in data.get("waves") or [] if isinstance(w, dict)]
        entries = [r for w in waves for r in w.get("requests") or [] if isinstance(r, dict)]
        held = [
            (r["item"], r["request"])
            for r in entries
            if isinstance(r.get("item"), str) and isinstance(r.get("request"), int)
        ]
    whole = not part or len(data.get("waves") or []) == data["pack"].get("waves")
    return verify_plan(
        data, workload, settings.card, settings.memory_bytes, requests=held, check_starts=whole
    )


def _report(verdict, num_waves: int, memory_bytes: int, prefix: str = "") -> int:
    if verdict.valid:
        click.echo(
            f"{prefix}valid: {num_waves} wave(s), verifier's cost {verdict.cost_s:.6f} s, "
            f"peak {verdict.peak_bytes:,} bytes of {memory_bytes:,}",
            err=True,
        )
        return 0
    for violation in verdict.violations:
        click.echo(f"{prefix}violation: {violation}", err=True)
    click.echo(f"{prefix}invalid: {len(verdict.violations)} violation(s)", err=True)
    return EXIT_INVALID


def _verify_pack(folder: Path, dataset: Path | None, values: dict[str, Any], learned: Path | None) -> int:
    """Every shard of a finished pack against its window of the dataset."""
    from cpplan.pack.outdir import read_manifest, shard_name
    from cpplan.pack.window_items import check_dataset
    from cpplan.plans.plan_reader import read_plan_file

    manifest = read_manifest(folder)
    path = dataset if dataset is not None else Path(manifest["dataset"])
    check_dataset(path, manifest["config"]["dataset_sha256"])
    if not manifest["complete"]:
        click.echo("cpplan: warning: the pack is not finished; checking its committed windows", err=True)
    failed, settings = 0, None
    for window in range(int(manifest["windows"])):
        shard = folder / shard_name(window)
        if not shard.exists() or not shard.read_text(encoding="utf-8").strip():
            continue  # a window whose items were all rejected has an empty shard
        data = read_plan_file(shard)
        settings = settings or _learned(data, read_settings(values, data), learned, shard)
        verdict = _verify_one(data, _workload(data, path, None), settings)
        if not verdict.valid:
            failed += 1
            _report(verdict, len(data["waves"]), settings.memory_bytes, prefix=f"{shard_name(window)}: ")
    if manifest["waves"] == 0:
        click.echo("cpplan: warning: the pack planned no item: there is no wave to check", err=True)
    if failed:
        click.echo(f"invalid: {failed} of {manifest['windows']} window(s) have violations", err=True)
        return EXIT_INVALID
    click.echo(
        f"valid: {manifest['windows']} window(s), {manifest['waves']} wave(s), each checked against {path}",
        err=True,
    )
    return 0
