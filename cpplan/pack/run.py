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
from cpplan.pack.readers import Cursor, Format, detect_format, input_size, progress_position, read_records
from cpplan.pack.windows import PackContext, WindowJob
from cpplan.pricing.ownership import CHUNK_TOKENS
from cpplan.pricing.serialize import cpplan_version
from cpplan.spec.card import ModelCard, Phase, load_model
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.topology import Topology
from cpplan.spec.units import parse_bytes

DEFAULT_WINDOW = 1024


@dataclass(frozen=True, kw_only=True)
class PackOutcome:
    """The finished manifest and this run's wall-clock figures."""

    manifest: dict[str, Any]
    run: dict[str, Any]


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _jobs(records: Iterator, first_index: int, window: int) -> Iterator[WindowJob]:
    for index in itertools.count(first_index):
        chunk = tuple(itertools.islice(records, window))
        if not chunk:
            return
        yield WindowJob(index=index, records=chunk)


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
    restart: bool = False,
    progress: bool | None = None,
) -> PackOutcome:
    """Plan every item of ``dataset`` in windows of ``window`` items and write ``output``.

    Every item ends in a plan shard or in ``rejects.jsonl``; a rerun after a crash resumes from the
    manifest. ``progress`` shows a bar (default: when standard error is a terminal)."""
    started = time.perf_counter()
    path = Path(dataset)
    if window < 1:
        raise InputError(f"must be at least 1, got {window}", field="window")
    if workers < 1:
        raise InputError(f"must be at least 1, got {workers}", field="workers")
    fmt = fmt or detect_format(path)
    if not path.is_file():
        raise InputError("no such file", file=str(path))
    card = model if isinstance(model, ModelCard) else load_model(model)
    profile = solver if isinstance(solver, SolverProfile) else load_solver(solver)
    profile = profile.with_time_budget(time_budget_s)
    topology = topology or Topology()
    memory = parse_bytes(memory_bytes) if isinstance(memory_bytes, str) else int(memory_bytes)
    if memory <= 0:
        raise InputError(f"must be a positive number of bytes, got {memory}", field="memory")
    if fmt == "sharegpt":
        tokenizer = tokenizer or DEFAULT_TOKENIZER
        load_tokenizer(tokenizer)
    else:
        tokenizer = None
    ctx = PackContext(
        source=str(path),
        fmt=fmt,
        model=card,
        topology=topology,
        memory_bytes=memory,
        num_layers=num_layers,
        phase=phase,
        profile=profile,
        tokenizer=tokenizer,
    )
    resolved = ctx.card
    config = {
        "dataset": str(path),
        "input_bytes": path.stat().st_size,
        "format": fmt,
        "tokenizer": tokenizer,
        "model": resolved.name,
        "model_digest": _digest(card.model_dump(mode="json")),
        "layers": resolved.num_layers,
        "phase": phase,
        "topology": topology.model_dump(),
        "memory_bytes": memory,
        "chunk_tokens": CHUNK_TOKENS,
        "safety": resolved.safety,
        "solver": profile.name,
        "solver_digest": _digest(profile.model_dump(mode="json", exclude={"path"})),
        "window": window,
        "cpplan_version": cpplan_version(),
    }
    out = OutDir(Path(output), config, restart=restart)
    resumed = out.num_windows
    bar = PackProgress(total=input_size(path, fmt), start=0, enabled=progress)
    bar.begin(out.manifest)
    items_before, tokens_before = out.manifest["items_in"], out.manifest["logical_tokens"]
    try:
        if not out.complete:
            start: Cursor = out.cursor
            bar.update(progress_position(start, fmt), out.manifest)
            jobs = _jobs(read_records(path, fmt, start), out.num_windows, window)
            for result in run_windows(jobs, ctx, engine=engine, workers=workers):
                out.commit(result)
                bar.update(progress_position(result.end, fmt), out.manifest)
    finally:
        bar.close()
    wall_s = time.perf_counter() - started
    done_items = out.manifest["items_in"] - items_before
    done_tokens = out.manifest["logical_tokens"] - tokens_before
    run = {
        "engine": engine,
        "workers": workers,
        "wall_s": wall_s,
        "items": done_items,
        "logical_tokens": done_tokens,
        "items_per_s": done_items / wall_s if wall_s > 0 else 0.0,
        "tokens_per_s": done_tokens / wall_s if wall_s > 0 else 0.0,
        "resumed_windows": resumed,
    }
    out.finish(run)
    return PackOutcome(manifest=out.manifest, run=run)
