"""Every figure the README's first screen and docs/benchmarks.md cite: where, the command, how to read it.

A :class:`Run` is one command that writes one JSON file (``{out}``) and the smaller command a quick run
uses in its place (``None``: the same command; ``()``: not run when quick). A :class:`Figure` is one
number as a doc states it: the doc, the exact text that cites it (``cited``, found verbatim in the doc),
the stated value (found inside ``cited``), the run that makes it and a reader that turns the run's JSON
into text formatted as the doc states it, so that stated and measured compare as strings.
:data:`INPUTS` are the numbers that describe an input (a workload's shape, a setting, a name), not a
result. ``tests/bench/test_reproduce.py`` checks that every number of the README's first screen and of
docs/benchmarks.md lies inside a figure's ``cited`` text or an input's text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

PY = "{python}"
CLI = (PY, "-c", "from cpplan.cli import run; run()")


@dataclass(frozen=True, kw_only=True)
class Run:
    """One command that writes the JSON a set of figures is read from."""

    name: str
    command: tuple[str, ...]
    quick_command: tuple[str, ...] | None = None

    def argv(self, *, quick: bool) -> tuple[str, ...]:
        """The command to run (empty: a quick run skips it)."""
        if quick and self.quick_command is not None:
            return self.quick_command
        return self.command


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One number a doc states, the run that makes it and how to read it from that run's JSON."""

    doc: str
    cited: str
    stated: str
    run: str
    read: Callable[[dict], str]
    what: str


@dataclass(frozen=True, kw_only=True)
class Input:
    """Text with numbers that describe an input or a name, not a measured result."""

    doc: str
    text: str


RUNS = (
    Run(
        name="grpo_packing",
        command=(PY, "benchmarks/grpo_packing.py", "--output", "{out}"),
    ),
    Run(
        name="bench",
        command=(*CLI, "bench", "--solver", "deterministic", "--repeats", "1", "--output", "{out}"),
    ),
    Run(
        name="bench_runtime_profile",
        command=(*CLI, "bench", "--repeats", "1", "--output", "{out}"),
    ),
    Run(
        name="ownership",
        command=(PY, "benchmarks/bench_ownership.py", "--output", "{out}"),
        quick_command=(PY, "benchmarks/bench_ownership.py", "--quick", "--output", "{out}"),
    ),
    Run(
        name="trl_step",
        command=(PY, "benchmarks/bench_trl_step.py", "--output", "{out}"),
        quick_command=(PY, "benchmarks/bench_trl_step.py", "--quick", "--output", "{out}"),
    ),
)


def headline(data: dict, family: str, planner: str) -> dict:
    """The bench headline row of one family and planner."""
    return next(h for h in data["headline"] if h["family"] == family and h["planner"] == planner)


def bench_cost(data: dict, case: str, cp: int, memory: str, planner: str) -> float:
    """The predicted step seconds of one bench row (``nan`` where it is missing or refused)."""
    for row in data["rows"]:
        if (row["case"], row["cp"], row["memory"], row["planner"]) == (case, cp, memory, planner):
            return row["cost_s"] if row["cost_s"] is not None else math.nan
    return math.nan


def ratio(data: dict, family: str, planner: str, digits: int = 1) -> str:
    """A peer's geometric-mean step time over cpplan's, as ``2.1``."""
    return f"{headline(data, family, planner)['vs_cpplan']:.{digits}f}"


def cheaper_pct(data: dict, case: str, cp: int, memory: str, planner: str) -> str:
    """How much cheaper ``planner``'s plan is than cpplan's, in percent (negative: costlier)."""
    ours = bench_cost(data, case, cp, memory, "cpplan")
    theirs = bench_cost(data, case, cp, memory, planner)
    return f"{(ours - theirs) / ours * 100:.1f}%"


def trl_run(data: dict, busy: int) -> dict | None:
    """The TRL step run with ``busy`` busy processes beside it (``None``: not run, as when quick)."""
    return next((r for r in data["runs"] if r["busy_processes"] == busy), None)


def trl_speedup(data: dict, busy: int) -> str:
    """Stock TRL's median step over cpplan's, as ``8.2``."""
    run = trl_run(data, busy)
    return "not run" if run is None else f"{run['speedup']:.1f}"


def within(data: dict, tolerance: float) -> str:
    """On how many instances CP-SAT's objective is the evaluator's price within ``tolerance``."""
    priced = [r for r in data["rows"] if r["price_s"] and r["objective_s"] is not None]
    close = sum(1 - tolerance <= r["objective_s"] / r["price_s"] <= 1 + 1e-9 for r in priced)
    return f"{close} of {len(data['rows'])}"


def oom_range(data: dict, planners: tuple[str, ...]) -> str:
    """The fewest and most out-of-memory plans among ``planners``, as ``12 to 67``."""
    counts = [headline(data, "all", p)["oom_plans"] for p in planners]
    return f"{min(counts)} to {max(counts)}"


TOKEN_BUDGET_PEERS = ("verl_dynamic_bsz", "axolotl_ffd", "trl_bfd", "megatron_zigzag")
PEERS = (*TOKEN_BUDGET_PEERS, "prefix_grouper")
README = "README.md"
BENCH_DOC = "docs/benchmarks.md"

SUITE_GAINS = (
    "**2.1× faster** than token-budget planners without sharing (verl, axolotl/TRL; 2.6–2.8× on GRPO), "
    "**2.2×** faster than Megatron's zigzag"
)

README_FIGURES = (
    Figure(
        doc=README,
        cited="**26,624 tokens instead of 172,032**",
        stated="26,624",
        run="grpo_packing",
        read=lambda d: f"{d['full']:,}",
        what="reference GRPO step, packed tokens (full sharing)",
    ),
    Figure(
        doc=README,
        cited="**26,624 tokens instead of 172,032**",
        stated="172,032",
        run="grpo_packing",
        read=lambda d: f"{d['logical']:,}",
        what="reference GRPO step, tokens without sharing",
    ),
    Figure(
        doc=README,
        cited="over the 88-instance suite",
        stated="88",
        run="bench",
        read=lambda d: str(headline(d, "all", "cpplan")["instances"]),
        what="bench suite instances",
    ),
    Figure(
        doc=README,
        cited=SUITE_GAINS,
        stated="2.1",
        run="bench",
        read=lambda d: ratio(d, "all", "verl_dynamic_bsz"),
        what="verl over cpplan, all (geometric mean)",
    ),
    Figure(
        doc=README,
        cited=SUITE_GAINS,
        stated="2.1",
        run="bench",
        read=lambda d: ratio(d, "all", "axolotl_ffd"),
        what="axolotl/TRL over cpplan, all",
    ),
    Figure(
        doc=README,
        cited=SUITE_GAINS,
        stated="2.6",
        run="bench",
        read=lambda d: ratio(d, "grpo", "verl_dynamic_bsz"),
        what="verl over cpplan, GRPO",
    ),
    Figure(
        doc=README,
        cited=SUITE_GAINS,
        stated="2.8",
        run="bench",
        read=lambda d: ratio(d, "grpo", "axolotl_ffd"),
        what="axolotl/TRL over cpplan, GRPO",
    ),
    Figure(
        doc=README,
        cited=SUITE_GAINS,
        stated="2.2",
        run="bench",
        read=lambda d: ratio(d, "all", "megatron_zigzag"),
        what="Megatron zigzag over cpplan, all",
    ),
    Figure(
        doc=README,
        cited="where 12 to 67 of theirs do",
        stated="12 to 67",
        run="bench",
        read=lambda d: oom_range(d, TOKEN_BUDGET_PEERS),
        what="token-budget peers' plans out of memory (of 88)",
    ),
    Figure(
        doc=README,
        cited="within 0.1% on 44 of 44 instances",
        stated="44 of 44",
        run="ownership",
        read=lambda d: within(d, 0.001),
        what="CP-SAT objective within 0.1% of the evaluator's price",
    ),
    Figure(
        doc=README,
        cited="runs **8.2× faster**",
        stated="8.2",
        run="trl_step",
        read=lambda d: trl_speedup(d, 0),
        what="TRL GRPO step, stock over cpplan (quiet machine)",
    ),
    Figure(
        doc=README,
        cited="and 8.1× beside two busy processes",
        stated="8.1",
        run="trl_step",
        read=lambda d: trl_speedup(d, 2),
        what="TRL GRPO step, stock over cpplan (2 busy processes)",
    ),
    Figure(
        doc=README,
        cited="for 4.4× fewer tokens",
        stated="4.4",
        run="trl_step",
        read=lambda d: f"{d['runs'][0]['token_ratio']:.1f}",
        what="TRL GRPO step, padded over packed tokens",
    ),
)


def _peer_rows() -> tuple[Figure, ...]:
    """docs/benchmarks.md's headline table: per peer, its ratio over all and on GRPO and its OOM plans."""
    figures = []
    for peer in PEERS:
        cited = f"| `{peer}` |"
        for family, digits in (("all", 2), ("grpo", 2)):
            figures.append(
                Figure(
                    doc=BENCH_DOC,
                    cited=cited,
                    stated="",
                    run="bench",
                    read=lambda d, p=peer, f=family, n=digits: ratio(d, f, p, n),
                    what=f"{peer} over cpplan, {family}",
                )
            )
        figures.append(
            Figure(
                doc=BENCH_DOC,
                cited=cited,
                stated="",
                run="bench",
                read=lambda d, p=peer: str(headline(d, "all", p)["oom_plans"]),
                what=f"{peer} plans out of memory (of 88)",
            )
        )
    return tuple(figures)


FIGURES = README_FIGURES
INPUTS = ()
