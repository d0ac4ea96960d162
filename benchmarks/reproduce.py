"""Rerun every registered figure of the README and docs/; print each beside the stated one.

Usage: ``python benchmarks/reproduce.py OUTDIR [--quick] [--only RUN ...] [--reuse]``.

Each run of :data:`cited_figures.RUNS` writes its JSON (and its log) into OUTDIR, never into the
committed results (``benchmarks/results/``, ``benchmarks/bench.json``): an OUTDIR inside
``benchmarks/`` is refused, and the committed files are hashed before and after, a change failing the
run. Then the table: doc, figure, stated, measured, match, command. It is also written to
``OUTDIR/figures.md`` and ``OUTDIR/figures.json``.

The registry (``benchmarks/cited_figures.py``) says which figures: every number of the README's first
screen, docs/benchmarks.md, docs/runtime.md and docs/memory.md, and the measured tables of other docs.
``--quick`` runs the smaller variant where one exists: the ownership benchmark on the README example
and the quick suite only, the TRL steps with one timed step each and no busy processes (so their figures
for two busy processes are ``not run``), the runtime, scale, fixed-share, dynamic-CP and equal-waves
benchmarks' quick or smaller runs. Their measured figures are of the smaller run, so they need
not match. The bench suites run whole either way (minutes on 2 cores; the deterministic profile's plans
are the same on any load). A full run reruns exactly what the docs cite: tens of minutes, for a quiet
machine, since the timed figures (the TRL step, the runtime and scale benchmarks) move with the load.
Runs that time CUDA kernels (marked ``needs_gpu`` in the registry) are skipped on a machine without a
CUDA device, and their figures say so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cited_figures import FIGURES, RUNS, Figure, Run

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = (ROOT / "benchmarks" / "results", ROOT / "benchmarks" / "bench.json")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One run's result: its JSON (``None`` when it failed or was skipped) and how it went."""

    run: Run
    data: dict | None
    status: str
    wall_s: float


def committed_digest(paths: tuple[Path, ...] = COMMITTED) -> dict[str, str]:
    """SHA-256 of every committed result file, by path."""
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def check_outdir(outdir: Path, committed: tuple[Path, ...] = COMMITTED) -> None:
    """Refuse an OUTDIR that is or lies inside the committed results' folders."""
    resolved = outdir.resolve()
    for path in committed:
        folder = path if path.suffix == "" else path.parent
        if resolved == folder.resolve() or folder.resolve() in resolved.parents:
            raise SystemExit(f"reproduce.py: OUTDIR {outdir} is inside {folder}; choose a folder elsewhere")


def fill(arg: str, *, python: str, out: str) -> str:
    """One argument with ``{python}`` and ``{out}`` filled in (other braces, as in code, kept)."""
    return arg.replace("{python}", python).replace("{out}", out)


def command_line(run: Run, out: Path, *, quick: bool) -> list[str]:
    """The run's argv with the interpreter and its JSON path filled in."""
    return [fill(a, python=sys.executable, out=str(out)) for a in run.argv(quick=quick)]


def shown(run: Run, *, quick: bool) -> str:
    """The command as a reader types it (``python``, ``cpplan``, ``OUTDIR/<run>.json``)."""
    argv = [fill(a, python="python", out=f"OUTDIR/{run.name}.json") for a in run.argv(quick=quick)]
    text = " ".join(argv)
    return text.replace("python -c from cpplan.cli import run; run()", "cpplan")


def has_cuda() -> bool:
    """Whether this machine has a CUDA device torch can use (no torch: none)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


GPU_SKIP = "skipped (needs a GPU: run it on a CUDA machine, as `cpplan gpu-check` is)"


def execute(run: Run, outdir: Path, *, quick: bool, reuse: bool, cuda: bool | None = None) -> Outcome:
    """Run one command (its output to ``OUTDIR/<name>.log``) and read the JSON it wrote; a run that needs
    a GPU is skipped, saying so, where ``cuda`` (default: :func:`has_cuda`) is false."""
    out = outdir / f"{run.name}.json"
    if reuse and out.exists():
        return Outcome(run=run, data=json.loads(out.read_text()), status="reused", wall_s=0.0)
    if run.needs_gpu and not (has_cuda() if cuda is None else cuda):
        return Outcome(run=run, data=None, status=GPU_SKIP, wall_s=0.0)
    argv = command_line(run, out, quick=quick)
    if not argv:
        return Outcome(run=run, data=None, status="skipped (full run only)", wall_s=0.0)
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    }
    start = time.perf_counter()
    with (outdir / f"{run.name}.log").open("w") as log:
        code = subprocess.run(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False
        ).returncode
    wall_s = time.perf_counter() - start
    if code != 0 or not out.exists():
        return Outcome(run=run, data=None, status=f"failed (exit {code}; see {run.name}.log)", wall_s=wall_s)
    return Outcome(run=run, data=json.loads(out.read_text()), status="ok", wall_s=wall_s)


def measured(figure: Figure, outcome: Outcome) -> str:
    """The figure read from its run, or why it could not be."""
    if outcome.data is None:
        return outcome.status
    try:
        return figure.read(outcome.data)
    except StopIteration:
        return "not in this run"
    except (KeyError, IndexError, TypeError, ZeroDivisionError) as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"


def rows(figures: tuple[Figure, ...], outcomes: dict[str, Outcome], *, quick: bool) -> list[dict]:
    """One row per figure: doc, what, stated, measured, match, command, and ``smaller_run`` where the
    figure came from a quick run's smaller variant (so that a mismatch there is expected)."""
    table = []
    for figure in figures:
        outcome = outcomes[figure.run]
        value = measured(figure, outcome)
        table.append(
            {
                "doc": figure.doc,
                "figure": figure.what,
                "stated": figure.stated,
                "measured": value,
                "match": value == figure.stated,
                "command": shown(outcome.run, quick=quick),
                "smaller_run": quick and outcome.run.quick_command is not None,
                "skipped": outcome.status == GPU_SKIP,
            }
        )
    return table


def markdown(table: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| doc | figure | stated | measured | match | command |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in table:
        match = "yes" if r["match"] else ("no (smaller run)" if r["smaller_run"] else "**no**")
        match = "skipped (GPU)" if r["skipped"] else match
        lines.append(
            f"| {r['doc']} | {r['figure']} | {r['stated']} | {r['measured']} | {match} | `{r['command']}` |"
        )
    return "\n".join(lines)


def reproduce(
    outdir: Path,
    *,
    quick: bool,
    only: tuple[str, ...] = (),
    reuse: bool = False,
    runs: tuple[Run, ...] = RUNS,
    figures: tuple[Figure, ...] = FIGURES,
    committed: tuple[Path, ...] = COMMITTED,
) -> list[dict]:
    """Run the runs the figures need into ``outdir``, check nothing committed changed, return the rows."""
    check_outdir(outdir, committed)
    outdir.mkdir(parents=True, exist_ok=True)
    before = committed_digest(committed)
    wanted = {f.run for f in figures if not only or f.run in only}
    outcomes = {}
    for run in (r for r in runs if r.name in wanted):
        print(f"[reproduce] {run.name}: {shown(run, quick=quick)}", flush=True)
        outcomes[run.name] = execute(run, outdir, quick=quick, reuse=reuse)
        print(
            f"[reproduce] {run.name}: {outcomes[run.name].status}, {outcomes[run.name].wall_s:.0f} s",
            flush=True,
        )
    changed = sorted(k for k, v in committed_digest(committed).items() if before.get(k) != v)
    if changed:
        raise SystemExit(f"reproduce.py: a run changed committed results: {', '.join(changed)}")
    return rows(tuple(f for f in figures if f.run in outcomes), outcomes, quick=quick)


def main(argv: list[str] | None = None) -> int:
    """Parse the options, reproduce, print and save the table; exit 1 when a figure differs from a rerun
    of the command that made it (a quick run's smaller variants excepted)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("outdir", type=Path, help="folder for every run's JSON and log and the table")
    parser.add_argument(
        "--quick", action="store_true", help="the smaller variant of each run (a smoke check)"
    )
    parser.add_argument(
        "--only", nargs="+", default=(), metavar="RUN", help=f"runs: {', '.join(r.name for r in RUNS)}"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="read a run's JSON already in OUTDIR instead of rerunning"
    )
    args = parser.parse_args(argv)
    table = reproduce(args.outdir, quick=args.quick, only=tuple(args.only), reuse=args.reuse)
    text = markdown(table)
    (args.outdir / "figures.md").write_text(text + "\n")
    (args.outdir / "figures.json").write_text(
        json.dumps({"quick": args.quick, "rows": table}, indent=1) + "\n"
    )
    print(text)
    same = sum(r["match"] for r in table)
    mismatches = sum(not r["match"] and not r["smaller_run"] and not r["skipped"] for r in table)
    skipped = sum(r["skipped"] for r in table)
    print(
        f"\n{same} of {len(table)} figures as stated; {mismatches} differ from a rerun of the cited command; "
        f"{skipped} need a GPU and were skipped; load average {os.getloadavg()}"
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
