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
    the pack's dataset). The model, topology, memory, layers and phase default to the plan's own; a
    model, topology, layers or phase other than the plan's is one violation naming both (nothing else is
    checked), another memory budget is said and checked. A plan priced with a learned correction is
    checked against it (from --learned, else from the plan). Every figure the plan states is recomputed
    or checked for consistency: docs/verify.md lists how, field by field."""
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
    settings, cause = _plan_settings(problem_values, data)
    if cause is not None:
        return _refuse(cause)
    settings = _learned(data, settings, learned, plan_file)
    verdict = _verify_one(data, _workload(data, workload, fields), settings)
    return _report(verdict, len(data.get("waves") or []), settings.memory_bytes)


def _plan_settings(values: dict[str, Any], data: dict[str, Any]):
    """The settings a plan is checked under, and the one cause that makes checking it pointless (else
    ``None``): the plan's own model cannot take its own layers (an edited plan), or an option names a
    model, depth, phase or topology other than the plan's, whose prices every figure of the plan would
    then miss. A budget other than the plan's is said once and checked: the plan's figures do not depend
    on it, and each rank over it is a violation of its own."""
    try:
        settings = read_settings(values, data)
        _ = settings.card_alone  # resolving the card is where a depth the model lacks fails
    except InputError as exc:
        if exc.field != "layers" or values.get("layers") is not None or "layers" not in data:
            raise
        said = str(exc).removeprefix("field 'layers': ")
        return None, (
            f"the plan states model {data.get('model')!r} with layers {data['layers']!r}, which that model "
            f"cannot run (field 'layers': {said})"
        )
    return settings, _stated_mismatch(settings, data)


def _stated_mismatch(settings, data: dict[str, Any]) -> str | None:
    """The first setting given on the command line that differs from the one the plan states (naming
    both), or ``None``; a different budget is said on standard error and is no mismatch."""
    from cpplan.spec.settings import topology_from_json

    ours = settings.to_json()
    options = {"model": "--model", "layers": "--layers", "phase": "--phase"}
    for field, option in options.items():
        if field in data and data[field] != ours[field]:
            return (
                f"the plan was made for {field} {data[field]!r}, not {ours[field]!r} ({option}): a plan "
                f"is checked under the settings it states (leave {option} out)"
            )
    if isinstance(data.get("topology"), dict):
        stated = topology_from_json(data["topology"])
        if stated != settings.topology:
            return (
                f"the plan was made for topology {stated}, not {settings.topology} (--topology, "
                "--dynamic-cp, --equal-waves): a plan is checked under the topology it states (leave "
                "them out)"
            )
    if isinstance(data.get("memory_bytes"), int) and data["memory_bytes"] != settings.memory_bytes:
        click.echo(
            f"cpplan: the plan was made for memory_bytes {data['memory_bytes']:,}; checking it at "
            f"{settings.memory_bytes:,} (--memory)",
            err=True,
        )
    return None


def _refuse(cause: str, prefix: str = "") -> int:
    """One violation that stops the check: its cause, said once."""
    click.echo(f"{prefix}violation: {cause}", err=True)
    click.echo(f"{prefix}invalid: 1 violation (nothing else is checked against these settings)", err=True)
    return EXIT_INVALID


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
        if settings is None:
            read, cause = _plan_settings(values, data)
            if cause is not None:
                return _refuse(cause, prefix=f"{shard_name(window)}: ")
            settings = _learned(data, read, learned, shard)
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
