"""``pack``: a whole dataset to plan shards, window by window, resumable after a crash."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpplan.errors import InputError
from cpplan.pack.console import PackProgress
from cpplan.pack.conversations import DEFAULT_TOKENIZER, load_tokenizer
from cpplan.pack.engines import Engine, run_windows
from cpplan.pack.outdir import OutDir
from cpplan.pack.readers import (
    Cursor,
    Format,
    detect_format,
    file_sha256,
    input_size,
    progress_position,
    read_records,
)
from cpplan.pack.windows import PackContext, WindowJob
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.problem import check_static_floor
from cpplan.spec.card import ModelCard, Phase
from cpplan.spec.profile import SolverProfile, TimingParams, load_solver
from cpplan.spec.records import DEFAULT_FIELDS, RecordFields
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.version import cpplan_version

DEFAULT_WINDOW = 1024


@dataclass(frozen=True, kw_only=True)
class PackOutcome:
    """The finished manifest and this run's wall-clock figures."""

    manifest: dict[str, Any]
    run: dict[str, Any]


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _jobs(records: Iterator, first_index: int, window: int, start: Cursor) -> Iterator[WindowJob]:
    for index in itertools.count(first_index):
        chunk = tuple(itertools.islice(records, window))
        if not chunk:
            return
        yield WindowJob(index=index, start=start, records=chunk)
        start = chunk[-1].end


def pack(
    dataset: str | Path,
    *,
    output: str | Path,
    model: ModelCard | str | Path,
    memory_bytes: int | str,
    topology: Topology | None = None,
    solver: SolverProfile | str | Path = "offline",
    time_budget_s: float | None = None,
    num_layers: int | None = None,
    phase: Phase = "cold",
    engine: Engine = "local",
    workers: int = 1,
    window: int = DEFAULT_WINDOW,
    fmt: Format | None = None,
    tokenizer: str | None = None,
    fields: RecordFields | None = None,
    restart: bool = False,
    progress: bool | None = None,
) -> PackOutcome:
    """Plan every item of ``dataset`` in windows of ``window`` items and write ``output``.

    Every item ends in a plan shard or in ``rejects.jsonl``; a rerun after a crash resumes from the
    manifest. ``fields`` renames the id and token fields of the records; ``progress`` shows a bar
    (default: when standard error is a terminal)."""
    started = time.perf_counter()
    path = Path(dataset)
    fmt = _check_input(path, fmt, window=window, workers=workers)
    settings = Settings.from_user(
        topology=topology, model=model, memory_bytes=memory_bytes, num_layers=num_layers, phase=phase
    )
    check_static_floor(settings.card, settings.memory_bytes)
    profile = solver if isinstance(solver, SolverProfile) else load_solver(solver)
    ctx = PackContext(
        source=str(path),
        fmt=fmt,
        settings=settings,
        profile=profile.with_time_budget(time_budget_s),
        tokenizer=_tokenizer(path, fmt, tokenizer),
        fields=fields or DEFAULT_FIELDS,
    )
    out = OutDir(Path(output), run_config(ctx, window), dataset=str(path.resolve()), restart=restart)
    resumed, before = out.num_windows, _counted(out)
    _plan_remaining(out, ctx, window=window, engine=engine, workers=workers, progress=progress)
    wall_s = time.perf_counter() - started
    items, tokens = (now - then for now, then in zip(_counted(out), before, strict=True))
    run = {
        "engine": engine,
        "workers": workers,
        "wall_s": wall_s,
        "items": items,
        "logical_tokens": tokens,
        "items_per_s": items / wall_s if wall_s > 0 else 0.0,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
        "resumed_windows": resumed,
    }
    out.finish(run)
    return PackOutcome(manifest=out.manifest, run=run)


def _check_input(path: Path, fmt: Format | None, *, window: int, workers: int) -> Format:
    """The input's format (given, or detected from its name) once the run's sizes are checked."""
    if window < 1:
        raise InputError(f"must be at least 1, got {window}", field="window")
    if workers < 1:
        raise InputError(f"must be at least 1, got {workers}", field="workers")
    fmt = fmt or detect_format(path)
    if not path.is_file():
        raise InputError("no such file", file=str(path))
    return fmt


def _tokenizer(path: Path, fmt: Format, tokenizer: str | None) -> str | None:
    """The tokenizer a JSON array's conversations are read with (loaded here when the first record is a
    conversation, so a bad name fails before any window runs); ``None`` for inputs that are tokens."""
    if fmt != "sharegpt":
        return None
    tokenizer = tokenizer or DEFAULT_TOKENIZER
    first = next(read_records(path, fmt), None)
    if first is not None and isinstance(first.payload, dict) and "conversations" in first.payload:
        load_tokenizer(tokenizer)
    return tokenizer


def run_config(ctx: PackContext, window: int) -> dict[str, Any]:
    """Everything the output depends on: a resumed run must have the same (the out dir checks it). The
    dataset counts by its content (SHA-256), not by the path it is given under."""
    path, settings, profile, resolved = Path(ctx.source), ctx.settings, ctx.profile, ctx.card
    return {
        "dataset_sha256": file_sha256(path),
        "input_bytes": path.stat().st_size,
        "format": ctx.fmt,
        "tokenizer": ctx.tokenizer,
        "fields": ctx.fields.to_dict(),
        **{key: value for key, value in settings.to_json().items() if key != "correction"},
        "model_digest": _digest(settings.model.model_dump(mode="json", exclude={"path"})),
        "chunk_tokens": CHUNK_TOKENS,
        "safety": resolved.safety,
        "solver": profile.name,
        "solver_digest": _digest(profile.model_dump(mode="json", exclude=_undigested(profile))),
        "window": window,
        "cpplan_version": cpplan_version(),
    }


def _undigested(profile: SolverProfile) -> set[str]:
    """Profile fields the solver digest leaves out: its path, and its timing estimates while they are
    the defaults (so a pack folder made before profiles had a ``[timing]`` table still resumes)."""
    return {"path"} | ({"timing"} if profile.timing == TimingParams() else set())


def _plan_remaining(
    out: OutDir, ctx: PackContext, *, window: int, engine: Engine, workers: int, progress: bool | None
) -> None:
    """Plan every window after the out dir's cursor with ``engine`` and commit each, in order."""
    path = Path(ctx.source)
    bar = PackProgress(total=input_size(path, ctx.fmt), start=0, enabled=progress)
    bar.begin(out.manifest)
    try:
        if not out.complete:
            start: Cursor = out.cursor
            bar.update(progress_position(start, ctx.fmt), out.manifest)
            records = read_records(path, ctx.fmt, start, fields=ctx.fields)
            jobs = _jobs(records, out.num_windows, window, start)
            for result in run_windows(jobs, ctx, engine=engine, workers=workers):
                out.commit(result)
                bar.update(progress_position(result.end, ctx.fmt), out.manifest)
    finally:
        bar.close()


def _counted(out: OutDir) -> tuple[int, int]:
    """Items and logical tokens the manifest counts so far."""
    return out.manifest["items_in"], out.manifest["logical_tokens"]
