"""Every figure the README's first screen and docs/benchmarks.md cite, and others the docs cite: where, the
command, how to read it.

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
import re
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
    needs_gpu: bool = False
    """The command times CUDA kernels: on a machine without a CUDA device it is skipped, saying so."""

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


def cited_pattern(cited: str) -> re.Pattern[str]:
    """``cited`` as a pattern in which any run of whitespace matches any other (a line break included),
    so that a cited text reads the same however the doc wraps it."""
    return re.compile(r"\s+".join(re.escape(word) for word in cited.split()))


README_PLAN = ("examples/grpo.jsonl", "--model", "qwen3.6-35b-a3b", "--memory", "8GiB")
"""The README example's workload, model and budget (its topology given per run)."""

FIRST_PASS_RUNS = (
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
        name="plan_cp2",
        command=(*CLI, "plan", *README_PLAN, "--topology", "cp=2", "--output", "{out}"),
    ),
    Run(
        name="plan_dp2_cp2",
        command=(*CLI, "plan", *README_PLAN, "--topology", "dp=2,cp=2", "--output", "{out}"),
    ),
    Run(
        name="dynamic_cp",
        command=(*CLI, "bench", "--dynamic-cp", "--solver", "deterministic", "--output", "{out}"),
        quick_command=(
            *CLI,
            "bench",
            "--dynamic-cp",
            "--solver",
            "deterministic",
            "--quick",
            "--output",
            "{out}",
        ),
    ),
    Run(
        name="proportionate_learning",
        command=(PY, "benchmarks/proportionate_learning.py", "--output", "{out}"),
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


def ours_cheaper_pct(data: dict, case: str, cp: int, memory: str, planner: str) -> str:
    """How much cheaper cpplan's plan is than ``planner``'s, in percent of theirs (negative: costlier)."""
    ours = bench_cost(data, case, cp, memory, "cpplan")
    theirs = bench_cost(data, case, cp, memory, planner)
    return f"{(theirs - ours) / theirs * 100:.1f}%"


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
        cited="within 0.1% on 41 of 44 instances",
        stated="41 of 44",
        run="ownership",
        read=lambda d: within(d, 0.001),
        what="CP-SAT objective within 0.1% of the evaluator's price",
    ),
    Figure(
        doc=README,
        cited="runs **7.6× faster**",
        stated="7.6",
        run="trl_step",
        read=lambda d: trl_speedup(d, 0),
        what="TRL GRPO step, stock over cpplan (quiet machine)",
    ),
    Figure(
        doc=README,
        cited="8.0× beside two",
        stated="8.0",
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


def pivot_cell(data: dict, family: str, planner: str) -> str:
    """One cell of ``cpplan bench``'s planner-by-family table, as the command prints it."""
    from cpplan.bench.runner import format_pivot

    lines = format_pivot(data["headline"]).splitlines()
    families = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    row = next(line for line in lines[2:] if line.startswith(f"| {planner} |"))
    return [c.strip() for c in row.strip("|").split("|")][1:][families.index(family)]


def gap_medians(data: dict) -> str:
    """The median gap over the all-plans bound per CP size, as ``0.00% / 2.97% / 3.75% / 7.48%``."""
    gaps = data["gap_distribution"]
    return " / ".join(f"{gaps[cp]['all_plans']['median_pct']:.2f}%" for cp in sorted(gaps, key=int))


def objective_ratio(data: dict) -> str:
    """CP-SAT's objective over the evaluator's price: min and median, and whether it is ever above."""
    ratios = data["summary"]["objective_over_price"]
    above = "never above" if ratios["above_price"] == 0 else f"above on {ratios['above_price']}"
    return f"min {ratios['min']:.4f}, median {ratios['median']:.4f}, {above}"


def bench_doc_table(doc: str, pivot: str) -> tuple[Figure, ...]:
    """One figure per cell of the planner-by-family table as ``doc`` cites it (``pivot``: its lines)."""
    lines = pivot.splitlines()
    families = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    figures = []
    for line in lines[2:]:
        planner, *cells = [c.strip() for c in line.strip("|").split("|")]
        for family, cell in zip(families, cells, strict=True):
            figures.append(
                Figure(
                    doc=doc,
                    cited=line,
                    stated=cell,
                    run="bench",
                    read=lambda d, f=family, p=planner: pivot_cell(d, f, p),
                    what=f"{planner} over cpplan, {family} (valid plans)",
                )
            )
    return tuple(figures)


def _table_of(doc: str) -> str:
    """The planner-by-family table's lines in ``doc`` (from its header to the first blank line)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / doc).read_text()
    start = text.index("| planner | all | grpo |")
    return text[start : text.index("\n\n", start)]


OOM_CITED = (
    "where 12 (verl), 53 (axolotl/TRL), 67 (Megatron's zigzag) and 18 (prefix_grouper) of their 88 plans do"
)
LONG_TAIL_CITED = "its plan costs 8.3207 s and 4.2854 s and cpplan's deterministic plan 7.9067 s and 4.1656 s"
RUNTIME_CITED = "it was 4.9% and 1.9% cheaper than zigzag's in our run"
OWN_CITED = (
    "plan: min 0.9709, median 1.0000, never above; within 0.1% on 41 of 44 instances. CP-SAT's plan is no"
    " costlier than greedy's on 44 of 44 instances"
)
GAP_CITED = "median at CP 1 / 2 / 4 / 8: 0.00% / 0.72% / 1.95% / 5.15%"


def _oom(planner: str, stated: str) -> Figure:
    """One peer's out-of-memory plan count in docs/benchmarks.md."""
    return Figure(
        doc=BENCH_DOC,
        cited=OOM_CITED,
        stated=stated,
        run="bench",
        read=lambda d: str(headline(d, "all", planner)["oom_plans"]),
        what=f"{planner} plans out of memory",
    )


def _long_tail(planner: str, cp: int, stated: str) -> Figure:
    """One long-tail plan's predicted seconds at 80 GiB in docs/benchmarks.md."""
    return Figure(
        doc=BENCH_DOC,
        cited=LONG_TAIL_CITED,
        stated=stated,
        run="bench",
        read=lambda d: f"{bench_cost(d, 'long_tail', cp, '80GiB', planner):.4f}",
        what=f"long tail, CP{cp}, 80 GiB: {planner} step s",
    )


BENCH_FIGURES = (
    _oom("verl_dynamic_bsz", "12"),
    _oom("axolotl_ffd", "53"),
    _oom("megatron_zigzag", "67"),
    _oom("prefix_grouper", "18"),
    Figure(
        doc=BENCH_DOC,
        cited=OOM_CITED,
        stated="88",
        run="bench",
        read=lambda d: str(headline(d, "all", "cpplan")["instances"]),
        what="bench suite instances",
    ),
    _long_tail("megatron_zigzag", 4, "8.3207"),
    _long_tail("megatron_zigzag", 8, "4.2854"),
    _long_tail("cpplan", 4, "7.9067"),
    _long_tail("cpplan", 8, "4.1656"),
    *(
        Figure(
            doc=BENCH_DOC,
            cited=RUNTIME_CITED,
            stated=stated,
            run="bench_runtime_profile",
            read=lambda d, cp=cp: ours_cheaper_pct(d, "long_tail", cp, "80GiB", "megatron_zigzag"),
            what=f"long tail, CP{cp}, 80 GiB: cpplan cheaper than zigzag (runtime profile)",
        )
        for cp, stated in ((4, "4.9%"), (8, "1.9%"))
    ),
    Figure(
        doc=BENCH_DOC,
        cited=OWN_CITED,
        stated="min 0.9709, median 1.0000, never above",
        run="ownership",
        read=objective_ratio,
        what="CP-SAT objective over the evaluator's price",
    ),
    Figure(
        doc=BENCH_DOC,
        cited=OWN_CITED,
        stated="41 of 44",
        run="ownership",
        read=lambda d: within(d, 0.001),
        what="CP-SAT objective within 0.1% of the price",
    ),
    Figure(
        doc=BENCH_DOC,
        cited=OWN_CITED,
        stated="on 44 of 44",
        run="ownership",
        read=lambda d: f"on {d['summary']['cpsat_no_costlier_than_greedy']} of {d['summary']['instances']}",
        what="CP-SAT's plan no costlier than greedy's",
    ),
    Figure(
        doc=BENCH_DOC,
        cited=GAP_CITED,
        stated="0.00% / 0.72% / 1.95% / 5.15%",
        run="ownership",
        read=gap_medians,
        what="gap over the all-plans bound, median per CP size",
    ),
)

FIRST_PASS_INPUTS = (
    Input(doc=README, text="(2 prompts × 8 completions, a 2,048-token system prompt, 8,192-token prompts)"),
    Input(doc=README, text="(random Qwen3, hidden 256, 4 layers, 2 prompts × 8 completions)"),
    Input(doc=README, text="on 2 CPU cores"),
    Input(doc=README, text="for CUDA 12.8"),
    Input(doc=README, text="(6 prompts × 4 completions sharing"),
    Input(doc=README, text="with 8 GiB per rank"),
    Input(doc=README, text="within 0.1% on"),
    Input(doc=BENCH_DOC, text="zigzag: 2×CP pieces per sequence, rank r holds r and 2CP−1−r"),
    Input(
        doc=BENCH_DOC,
        text="GRPO with G = 8 and 16 and prompt:completion 1:8, 1:1, 4:1 and 16:1 (8,192-token",
    ),
    Input(doc=BENCH_DOC, text="the first 128 ShareGPT"),
    Input(doc=BENCH_DOC, text="and 64 long-tail sequences"),
    Input(doc=BENCH_DOC, text="CP 1, 2, 4 and 8; 40 GiB and 80 GiB per rank"),
    Input(doc=BENCH_DOC, text="**The long tail at CP 4 and CP 8, 80 GiB**"),
    Input(doc=BENCH_DOC, text="(0.1 s of wall clock"),
    Input(doc=BENCH_DOC, text="README example at 8 GiB"),
    Input(
        doc=BENCH_DOC,
        text="four held-out steps generated with other seeds at 40 GiB; CP 1, 2, 4 and 8: 44 instances",
    ),
    Input(doc=BENCH_DOC, text="within 0.1% on"),
    Input(doc=BENCH_DOC, text="at its budget, at 2× and 4× it"),
)

OTHER_DOC_FIGURES = (
    Figure(
        doc="docs/concepts.md",
        cited="the plan costs 0.6788 s, where its four waves sum to 1.3559 s",
        stated="0.6788",
        run="plan_dp2_cp2",
        read=lambda d: f"{d['cost_s']:.4f}",
        what="README example at dp=2,cp=2: the plan's makespan",
    ),
    Figure(
        doc="docs/concepts.md",
        cited="the plan costs 0.6788 s, where its four waves sum to 1.3559 s",
        stated="1.3559",
        run="plan_dp2_cp2",
        read=lambda d: f"{sum(w['cost_s'] for w in d['waves']):.4f}",
        what="README example at dp=2,cp=2: its waves' sum",
    ),
    *(
        Figure(
            doc="docs/runtime.md",
            cited=cited,
            stated=stated,
            run="plan_cp2",
            read=read,
            what=what,
        )
        for cited, stated, read, what in (
            ("`gap` 0.009", "0.009", lambda d: f"{d['solver']['gap']:.3f}", "README example at CP2: gap"),
            (
                "`model_gap` 0.0",
                "0.0",
                lambda d: f"{d['solver']['model_gap']:.1f}",
                "README example: model gap",
            ),
            (
                "costs less than 1.1812 s",
                "1.1812",
                lambda d: f"{math.floor(d['solver']['bound_s'] * 1e4) / 1e4:.4f}",  # a bound rounds down
                "README example: bound",
            ),
            (
                "against the plan's 1.1922 s",
                "1.1922",
                lambda d: f"{d['cost_s']:.4f}",
                "README example: plan s",
            ),
        )
    ),
)


def dynamic_row(data: dict, case: str, memory: str) -> dict:
    """One instance of the dynamic-CP bench's summary."""
    return next(r for r in data["summary"] if (r["case"], r["memory"]) == (case, memory))


def dynamic_gain(data: dict) -> str:
    """The geometric-mean gain of dynamic over the best fixed CP, as ``1.028``."""
    gains = [r["gain"] for r in data["summary"] if r["gain"]]
    return f"{math.exp(sum(math.log(g) for g in gains) / len(gains)):.3f}"


DYNAMIC_DOC = "docs/dynamic_cp.md"
DYNAMIC_FIGURES = (
    Figure(
        doc=DYNAMIC_DOC,
        cited="Geometric-mean gain of dynamic over the best fixed CP: 1.017×",
        stated="1.017",
        run="dynamic_cp",
        read=dynamic_gain,
        what="dynamic over the best fixed CP, geometric mean",
    ),
    *(
        Figure(
            doc=DYNAMIC_DOC,
            cited=f"{stated}× at {memory[:2]} GiB",
            stated=stated,
            run="dynamic_cp",
            read=lambda d, m=memory: f"{dynamic_row(d, 'long_tail_192k', m)['gain']:.3f}",
            what=f"dynamic CP gain, long tail, {memory}",
        )
        for memory, stated in (("40GiB", "1.033"), ("80GiB", "1.073"))
    ),
)

LEARNING_CITED = "| next plan | 6 | 1.895 s | 27,122 | 1.11859 | 1.24 |"
LEARNING_FIGURES = (
    Figure(
        doc="docs/learning.md",
        cited=LEARNING_CITED,
        stated="6",
        run="proportionate_learning",
        read=lambda d: str(d["next"]["num_waves"]),
        what="README example, one observation: the next plan's waves",
    ),
    Figure(
        doc="docs/learning.md",
        cited=LEARNING_CITED,
        stated="1.895",
        run="proportionate_learning",
        read=lambda d: f"{d['next']['cost_s']:.3f}",
        what="README example, one observation: the next plan's predicted step",
    ),
    Figure(
        doc="docs/learning.md",
        cited="The next plan costs 1.06× the true card's plan",
        stated="1.06",
        run="proportionate_learning",
        read=lambda d: f"{d['next_over_true']:.2f}",
        what="the next plan over the true card's plan",
    ),
)

RUNTIME_DOC = "docs/runtime.md"
RUNTIME_LABEL = "2026-12-05"
"""The label under which ``bench_runtime.py`` and ``bench_scale.py`` wrote the runs docs/runtime.md cites."""
DASH = "–"


def table_lines(doc: str, header: str) -> list[str]:
    """The body rows of the Markdown table in ``doc`` whose header line starts with ``header``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / doc).read_text()
    start = text.index(header)
    return text[start : text.index("\n\n", start)].splitlines()[2:]


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, stripped."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_figures(
    doc: str, header: str, *, run: str, num_keys: int, line_of: Callable[[dict, tuple], str], what: str
) -> tuple[Figure, ...]:
    """One figure per measured cell of a table in ``doc``: a row is named by its first ``num_keys`` cells
    (the input), and ``line_of(data, key)`` formats that row from the run's JSON as the doc writes it."""
    figures = []
    for line in table_lines(doc, header):
        row = cells(line)
        key = tuple(row[:num_keys])
        for index in range(num_keys, len(row)):
            figures.append(
                Figure(
                    doc=doc,
                    cited=line,
                    stated=row[index],
                    run=run,
                    read=lambda d, k=key, i=index: cells(line_of(d, k))[i],
                    what=f"{what}, {' '.join(key)}, column {index + 1}",
                )
            )
    return tuple(figures)


def markdown_row(values: list[str]) -> str:
    """``values`` as a Markdown table row."""
    return "| " + " | ".join(values) + " |"


def statuses_text(statuses: dict[str, int]) -> str:
    """CP-SAT's statuses over the steps, most frequent first, as ``feasible 18, unknown 2``."""
    return ", ".join(f"{k} {v}" for k, v in sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0])))


def runtime_step_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/runtime.md's step-latency table from ``bench_runtime.py``'s JSON."""
    case, cp = key[0], int(key[1])
    c = next(c for c in data[RUNTIME_LABEL]["cases"] if (c["case"], c["cp"]) == (case, cp))
    return markdown_row(
        [
            case,
            str(cp),
            c["memory"].removesuffix("GiB"),
            str(c["items"]),
            f"{c['p50_ms']:.1f}",
            f"{c['p95_ms']:.1f}",
            f"{c['max_ms']:.1f}",
            f"{c['within_budget']:.0%}",
            f"{c['cpsat_ran']:.0%}",
            statuses_text(c["statuses"]),
            f"{c['greedy_median_ms']:.1f}",
            f"{c['cost_vs_greedy']:.4f}",
        ]
    )


def load_range(loads: list[float]) -> str:
    """Load averages as ``1.9–2.0`` (one figure where they round alike)."""
    low, high = f"{min(loads):.1f}", f"{max(loads):.1f}"
    return low if low == high else f"{low}{DASH}{high}"


BUSY_LABEL = "fixed_share_busy2"
"""The label of the fixed-share run beside two busy processes in ``bench_scale_cluster.json``."""


def fixed_share_line(data: dict, key: tuple[str, ...], label: str = "fixed_share") -> str:
    """One row of docs/runtime.md's fixed-share table from ``bench_scale.py --cluster --fixed-share``
    (the run labelled ``label``: ``fixed_share_busy2`` is the one beside two busy processes)."""
    workload, completions = key[0], int(key[1].replace(",", ""))
    dp, cp = (int(v) for v in key[2].split(" × "))
    r = next(
        r
        for r in data[label]["rows"]
        if (r["workload"], r["completions"], r["dp"], r["cp"]) == (workload, completions, dp, cp)
    )
    a, d = r["rank"], r["default"]
    default = DASH if d is None else f"{1e3 * d['wall_p50_s']:,.0f} / {1e3 * d['wall_p95_s']:,.0f}"
    ratio = DASH if d is None or d["over_reference"] is None else f"{d['over_reference']:.3f}"
    return markdown_row(
        [
            *key,
            f"{1e3 * a['wall_p50_s']:,.0f} / {1e3 * a['wall_p95_s']:,.0f}",
            f"{a['p95_over_budget']:.2f}",
            f"{a['cpsat_share']:.0%}",
            f"{a['hurried_share']:.0%}",
            default,
            ratio,
            load_range(a["load_avg"] + (d["load_avg"] if d else [])),
        ]
    )


def scale_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/runtime.md's scale table from ``bench_scale.py``'s JSON."""
    workload, items, requests = key[0], int(key[1].replace(",", "")), int(key[2].replace(",", ""))
    r = next(
        r
        for r in data[RUNTIME_LABEL]["rows"]
        if (r["workload"], r["items"], r["requests"]) == (workload, items, requests)
    )
    per = r["greedy_s"] / max(items, requests) * 1e6
    return markdown_row(
        [
            *key,
            f"{r['build_s']:.2f}",
            f"{r['greedy_s']:.2f}",
            f"{per:.0f}",
            f"{r['serialize_s'] + r['verify_s']:.2f}",
            f"{r['plan_call_s']:.2f}",
        ]
    )


RUNTIME_RUNS = (
    Run(
        name="runtime_steps",
        command=(PY, "benchmarks/bench_runtime.py", "--label", RUNTIME_LABEL, "--output", "{out}"),
        quick_command=(
            *(PY, "benchmarks/bench_runtime.py", "--quick"),
            *("--label", RUNTIME_LABEL, "--output", "{out}"),
        ),
    ),
    Run(
        name="scale",
        command=(PY, "benchmarks/bench_scale.py", "--pack", "--label", RUNTIME_LABEL, "--output", "{out}"),
        quick_command=(
            *(PY, "benchmarks/bench_scale.py", "--quick"),
            *("--label", RUNTIME_LABEL, "--output", "{out}"),
        ),
    ),
    Run(
        name="fixed_share",
        command=(PY, "benchmarks/bench_scale.py", "--cluster", "--fixed-share", "--output", "{out}"),
        quick_command=(
            *(PY, "benchmarks/bench_scale.py", "--cluster", "--fixed-share", "--repeats", "1"),
            *("--share-rows", "1024x8x8,2048x16x8", "--node-rows", "64x4", "--output", "{out}"),
        ),
    ),
    Run(
        name="fixed_share_busy",
        command=(
            *(PY, "benchmarks/bench_scale.py", "--cluster", "--fixed-share", "--busy", "2"),
            *("--label", BUSY_LABEL, "--output", "{out}"),
        ),
        quick_command=(
            *(PY, "benchmarks/bench_scale.py", "--cluster", "--fixed-share", "--busy", "2", "--repeats", "1"),
            *("--share-rows", "1024x8x8", "--node-rows", "64x4", "--label", BUSY_LABEL, "--output", "{out}"),
        ),
    ),
    Run(
        name="partition",
        command=(
            *(PY, "benchmarks/bench_scale.py", "--cluster", "--partition"),
            *("--share-rows", "1024x8x8,8192x64x8,16384x128x8", "--output", "{out}"),
        ),
    ),
)


def runtime_case(data: dict, case: str, cp: int) -> dict:
    """One workload's row of ``bench_runtime.py``'s run."""
    return next(c for c in data[RUNTIME_LABEL]["cases"] if (c["case"], c["cp"]) == (case, cp))


def sweep_increase(data: dict, plan: str) -> str:
    """The memory sweep's largest cost increase over a smaller budget, as ``+0.38%``."""
    return f"+{data[RUNTIME_LABEL]['sweep']['worst_increase'][plan] * 100:.2f}%"


def cpsat_ran_text(case: dict) -> str:
    """The steps of a ``bench_runtime.py`` case CP-SAT ran on, as ``17 of 20``."""
    return f"{round(case['cpsat_ran'] * case['steps'])} of {case['steps']}"


def one_node_cpsat_text(data: dict, label: str) -> str:
    """The one-node (dp = 1) calls of fixed-share run ``label`` that CP-SAT answered, as ``16 of 18``."""
    rows = [r["rank"] for r in data[label]["rows"] if r["dp"] == 1]
    answered = sum(round(r["cpsat_share"] * len(r["walls_s"])) for r in rows)
    return f"{answered} of {sum(len(r['walls_s']) for r in rows)}"


def partition_row(data: dict, completions: int) -> dict:
    """The ``--cluster --partition`` run's row of one step."""
    return next(r for r in data["partition"]["rows"] if r["completions"] == completions)


def partition_ms(data: dict, completions: int) -> str:
    """``partition_items``'s median milliseconds on one step, as ``1.5``."""
    return f"{partition_row(data, completions)['median_ms']:.1f}"


def fixed_share_row(data: dict, completions: int, dp: int, label: str = "fixed_share") -> dict:
    """One row of the fixed-share run labelled ``label``."""
    return next(r for r in data[label]["rows"] if (r["completions"], r["dp"]) == (completions, dp))


def worst_p95_s(data: dict, label: str, *, cp: int) -> float:
    """The largest replica-call p95 (seconds) among the partitioned rows at ``cp`` of run ``label``."""
    return max(r["rank"]["wall_p95_s"] for r in data[label]["rows"] if r["cp"] == cp and r["dp"] > 1)


def pack_s(data: dict, profile: str) -> str:
    """``cpplan pack``'s wall seconds for the 20,000 small items under ``profile``."""
    return f"{next(p for p in data[RUNTIME_LABEL]['packs'] if p['profile'] == profile)['wall_s']:.1f}"


SWEEP_CITED = "greedy +0.40%, the deterministic profile +0.29%, the runtime profile +2.85%"
PACK_CITED = "one process): 21.5 s with the default `offline` profile and 8.2 s with `deterministic`"
PARTITION_CITED = "0.6 ms at 1,024 completions (dp 8), 2.5 ms at 8,192 (dp 64), 4.7 ms at 16,384 (dp 128)"
DIGEST_CITED = (
    "The digests it reads cost 2.0, 14.1 and 27.7 ms of the steps' validation (55, 450 and 704 ms to build"
    " the items anew"
)
DEFAULT_CALL_CITED = "p50 168 ms at 2,048 completions on dp 16, 1,333 ms at 16,384 on dp 128"
DEFAULT_RATIO_CITED = "(1.029× and 1.011× at 1,024 completions on dp 8 × cp 8 and dp 16 × cp 4:"


def _runtime(cited: str, stated: str, run: str, read, what: str) -> Figure:
    """One figure of docs/runtime.md."""
    return Figure(doc=RUNTIME_DOC, cited=cited, stated=stated, run=run, read=read, what=what)


def _quiet_and_busy(cited: str, stated: tuple[str, str], read, what: str) -> tuple[Figure, ...]:
    """A docs/runtime.md sentence's two figures: the quiet fixed-share run's and the busy one's, each
    read by ``read(data, label)``."""
    runs = (("fixed_share", "fixed_share"), ("fixed_share_busy", BUSY_LABEL))
    return tuple(
        _runtime(cited, value, run, lambda d, label=label: read(d, label), f"{what}, {label}")
        for value, (run, label) in zip(stated, runs, strict=True)
    )


RUNTIME_FIGURES = (
    *table_figures(
        RUNTIME_DOC,
        "| workload | CP | GiB | items | p50 ms |",
        run="runtime_steps",
        num_keys=2,
        line_of=runtime_step_line,
        what="runtime step",
    ),
    *table_figures(
        RUNTIME_DOC,
        "| workload | items | requests | build s |",
        run="scale",
        num_keys=3,
        line_of=scale_line,
        what="scale",
    ),
    *table_figures(
        RUNTIME_DOC,
        "| workload | completions | dp × cp | replica call",
        run="fixed_share",
        num_keys=3,
        line_of=fixed_share_line,
        what="fixed share",
    ),
    *table_figures(
        RUNTIME_DOC,
        "| beside 2 busy processes | completions | dp × cp |",
        run="fixed_share_busy",
        num_keys=3,
        line_of=lambda d, k: fixed_share_line(d, k, BUSY_LABEL),
        what="fixed share, 2 busy processes",
    ),
    _runtime(
        "(p95 75.9 ms on this machine), and CP-SAT",
        "75.9",
        "runtime_steps",
        lambda d: f"{runtime_case(d, 'grpo32x8', 4)['p95_ms']:.1f}",
        "grpo32x8 p95 ms",
    ),
    _runtime(
        "(LNS over windows) ran on 19 of 20 of its calls",
        "19 of 20",
        "runtime_steps",
        lambda d: cpsat_ran_text(runtime_case(d, "grpo32x8", 4)),
        "grpo32x8: calls CP-SAT ran on",
    ),
    _runtime(
        "CP8 greedy alone takes about 11 ms, so",
        "11",
        "runtime_steps",
        lambda d: f"{runtime_case(d, 'grpo8x8', 8)['greedy_median_ms']:.0f}",
        "grpo8x8 CP8: greedy alone, median ms",
    ),
    _runtime(
        "so CP-SAT ran on 20 of 20 calls",
        "20 of 20",
        "runtime_steps",
        lambda d: cpsat_ran_text(runtime_case(d, "grpo8x8", 8)),
        "grpo8x8 CP8: calls CP-SAT ran on",
    ),
    _runtime(
        "CP-SAT answered 17 of 18 one-node calls",
        "17 of 18",
        "fixed_share_busy",
        lambda d: one_node_cpsat_text(d, BUSY_LABEL),
        "one-node calls CP-SAT answered, 2 busy processes",
    ),
    _runtime(
        "on 17 of 20 steps of `grpo8x8` at CP4 (cost / greedy 0.9935)",
        "17 of 20",
        "runtime_steps",
        lambda d: f"{runtime_case(d, 'grpo8x8', 4)['improved']} of {runtime_case(d, 'grpo8x8', 4)['steps']}",
        "grpo8x8 CP4: steps where CP-SAT improved on greedy",
    ),
    _runtime(
        "on 17 of 20 steps of `grpo8x8` at CP4 (cost / greedy 0.9935)",
        "0.9935",
        "runtime_steps",
        lambda d: f"{runtime_case(d, 'grpo8x8', 4)['cost_vs_greedy']:.4f}",
        "grpo8x8 CP4: cost / greedy",
    ),
    *(
        _runtime(
            SWEEP_CITED, stated, "runtime_steps", lambda d, p=plan: sweep_increase(d, p), f"sweep {plan}"
        )
        for plan, stated in (("greedy", "+0.40%"), ("deterministic", "+0.29%"), ("runtime", "+2.85%"))
    ),
    *(
        _runtime(PACK_CITED, stated, "scale", lambda d, p=profile: pack_s(d, p), f"cpplan pack, {profile}")
        for profile, stated in (("offline", "21.5"), ("deterministic", "8.2"))
    ),
    *(
        _runtime(PARTITION_CITED, stated, "partition", lambda d, n=n: partition_ms(d, n), f"partition, {n}")
        for n, stated in ((1024, "0.6"), (8192, "2.5"), (16384, "4.7"))
    ),
    *(
        _runtime(
            DIGEST_CITED,
            stated,
            "partition",
            lambda d, n=n, k=key, f=fmt: format(partition_row(d, n)[k], f),
            f"partition, {n}, {key}",
        )
        for key, fmt, stated_by_n in (
            ("digest_median_ms", ".1f", ("2.0", "14.1", "27.7")),
            ("validate_median_ms", ",.0f", ("55", "450", "704")),
        )
        for n, stated in zip((1024, 8192, 16384), stated_by_n, strict=True)
    ),
    _runtime(
        "load average 1.0), made by",
        "1.0",
        "partition",
        lambda d: f"{d['partition']['rows'][0]['load_avg']:.1f}",
        "partition run's load average",
    ),
    *(
        _runtime(
            DEFAULT_RATIO_CITED,
            stated,
            "fixed_share",
            lambda d, dp=dp: f"{fixed_share_row(d, 1024, dp)['default']['over_reference']:.3f}",
            f"default call over the deterministic plan, dp {dp}",
        )
        for dp, stated in ((8, "1.029"), (16, "1.011"))
    ),
    *(
        _runtime(
            cited,
            stated,
            run,
            lambda d, dp=dp, label=label: (
                f"{1e3 * fixed_share_row(d, 1024, dp, label)['default']['wall_p95_s']:,.0f}"
            ),
            f"default call p95 ms, dp {dp}, {label}",
        )
        for cited, run, label, stated_by_dp in (
            ("on the quiet machine (p95 81 and 87 ms)", "fixed_share", "fixed_share", ("81", "87")),
            ("processes its p95 is 191 and 156 ms", "fixed_share_busy", BUSY_LABEL, ("191", "156")),
        )
        for dp, stated in zip((8, 16), stated_by_dp, strict=True)
    ),
    *(
        _runtime(
            DEFAULT_CALL_CITED,
            stated,
            "fixed_share",
            lambda d, n=n, dp=dp: f"{1e3 * fixed_share_row(d, n, dp)['default']['wall_p50_s']:,.0f}",
            f"default call p50 ms, dp {dp}",
        )
        for n, dp, stated in ((2048, 16, "168"), (16384, 128, "1,333"))
    ),
    *_quiet_and_busy(
        "(cp 8: p95 at most 74 ms quiet, 59 ms busy,",
        ("74", "59"),
        lambda d, label: f"{1e3 * worst_p95_s(d, label, cp=8):,.0f}",
        "replica call p95 ms at cp 8, worst",
    ),
    *_quiet_and_busy(
        "the worst p95 is 0.88 times the budget quiet (the agent step at cp 8) and 0.97 beside the busy"
        " processes",
        ("0.88", "0.97"),
        lambda d, label: f"{max(r['rank']['p95_over_budget'] for r in d[label]['rows']):.2f}",
        "replica call p95 over the budget, worst",
    ),
    *(
        _runtime(
            "sizes): −0.00 (p50) and 0.05 (p95) on the quiet machine, 0.02 and 0.04 beside the busy"
            " processes",
            stated,
            run,
            lambda d, k=key, label=label: f"{d[label]['growth_exponents'][k]:.2f}".replace("-", "−"),
            f"growth exponent, {key}, {label}",
        )
        for key, stated, run, label in (
            ("wall_p50_s", "−0.00", "fixed_share", "fixed_share"),
            ("wall_p95_s", "0.05", "fixed_share", "fixed_share"),
            ("wall_p50_s", "0.02", "fixed_share_busy", BUSY_LABEL),
            ("wall_p95_s", "0.04", "fixed_share_busy", BUSY_LABEL),
        )
    ),
)


MEMORY_DOC = "docs/memory.md"
MEMORY_RUNS = (
    Run(
        name="memory_table",
        command=(PY, "benchmarks/memory_table.py", "--output", "{out}.md", "--json", "{out}"),
    ),
)


def rendered_line(data: list, index: int) -> str:
    """Line ``index`` of docs/memory.md as ``benchmarks/memory_table.py`` renders it from its JSON."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / "memory_table.py"
    spec = importlib.util.spec_from_file_location("memory_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render(data).splitlines()[index].strip()


def generated_doc_figures(doc: str, run: str, read_line) -> tuple[Figure, ...]:
    """A doc that a command prints whole: one figure per line holding a digit, the line itself as
    stated, read back as the same line of the command's rendering of its JSON."""
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / doc).read_text().splitlines()
    return tuple(
        Figure(
            doc=doc,
            cited=line.strip(),
            stated=line.strip(),
            run=run,
            read=lambda d, i=index: read_line(d, i),
            what=f"{doc} line {index + 1}",
        )
        for index, line in enumerate(lines)
        if any(ch.isdigit() for ch in line)
    )


MEMORY_FIGURES = generated_doc_figures(MEMORY_DOC, "memory_table", rendered_line)


TIME_DOC = "docs/time_model.md"
TIME_RUNS = (Run(name="cp_scaling", command=(PY, "benchmarks/cp_scaling.py", "{out}")),)


def cp_single_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/time_model.md's one-request table from ``cp_scaling.py``'s ``single`` part."""
    row = data["single"][key[0].replace(",", "")]
    parts = [key[0], f"{row['1']['step_s']:.3f} s"]
    for cp in ("2", "4", "8"):
        eff = row[cp]["efficiency"]
        modes = " / ".join(f"{eff[m]:.2f}" for m in ("rounds", "parallel", "head_parallel"))
        parts.append(f"{modes} ({row[cp]['chosen']})")
    return markdown_row(parts)


def cp_card_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/time_model.md's per-card table from ``cp_scaling.py``'s ``cards`` part."""
    card = data["cards"][key[0]]
    efficiencies = [f"{card[k]['efficiency']:.2f} ({card[k]['chosen']})" for k in ("131072@8", "32768@4")]
    return markdown_row([key[0], *efficiencies])


TIME_FIGURES = (
    *table_figures(
        TIME_DOC,
        "| tokens | T(1) | CP2 rounds",
        run="cp_scaling",
        num_keys=1,
        line_of=cp_single_line,
        what="one request's CP efficiency",
    ),
    *table_figures(
        TIME_DOC,
        "| card | 128K at CP8 | 32K at CP4 |",
        run="cp_scaling",
        num_keys=1,
        line_of=cp_card_line,
        what="CP efficiency per card",
    ),
)


HELD_OUT_CITED = "long tail 0.86 / 0.82 / 0.73, agent trees 0.86 / 0.85 / 0.79, ShareGPT 0.89 / 0.89 / 0.86"


def held_out(data: dict, workload: str) -> str:
    """A held-out workload's CP efficiency at CP 2 / 4 / 8, as ``0.86 / 0.77 / 0.72``."""
    return " / ".join(f"{data['held_out'][workload][cp]['efficiency']:.2f}" for cp in ("2", "4", "8"))


HELD_OUT_FIGURES = tuple(
    Figure(
        doc=TIME_DOC,
        cited=HELD_OUT_CITED,
        stated=stated,
        run="cp_scaling",
        read=lambda d, w=workload: held_out(d, w),
        what=f"held-out {workload}: CP efficiency at CP 2 / 4 / 8",
    )
    for workload, stated in (
        ("long_tail", "0.86 / 0.82 / 0.73"),
        ("agent_trees", "0.86 / 0.85 / 0.79"),
        ("sharegpt", "0.89 / 0.89 / 0.86"),
    )
)


KERNEL_CITED_MS = "| ms | 4.36 | 4.45 | 5.14 | 6.24 | 8.58 | 13.37 | 23.44 | 45.92 | 90.28 | 182.13 |"
KERNEL_CITED_FIT = (
    "| fit `2.53 µs × T + 3.80 ms` | 4.12 | 4.45 | 5.09 | 6.39 | 8.97 | 14.15 | 24.49 | 45.19 | 86.57 "
    "| 169.34 |"
)
GPU_RUNS = (
    Run(
        name="kernels",
        command=("sh", "-c", "{python} benchmarks/measure_kernels.py | tail -n 1 > {out}"),
        needs_gpu=True,
    ),
)


def kernel_fit(data: dict) -> tuple[float, float]:
    """``t(T) = a·T + b`` fitted to the period's times by relative least squares: (a, b) in seconds."""
    import numpy as np

    tokens, seconds = (np.array(v, dtype=float) for v in zip(*data["period"], strict=True))
    design = np.stack([tokens / seconds, 1 / seconds], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    return float(a), float(b)


def kernel_row(data: dict, fitted: bool) -> str:
    """The kernel table's ``ms`` row (measured) or its ``fit`` row, as docs/time_model.md writes them."""
    a, b = kernel_fit(data)
    if not fitted:
        return markdown_row(["ms", *(f"{1e3 * t:.2f}" for _, t in data["period"])])
    label = f"fit `{a * 1e6:.2f} µs × T + {b * 1e3:.2f} ms`"
    return markdown_row([label, *(f"{1e3 * (a * n + b):.2f}" for n, _ in data["period"])])


KERNEL_TABLE_FIGURES = tuple(
    Figure(
        doc=TIME_DOC,
        cited=cited,
        stated=stated,
        run="kernels",
        read=lambda d, f=fitted, i=index: cells(kernel_row(d, f))[i],
        what=f"kernel period, {'fit' if fitted else 'measured'}, column {index + 1}",
    )
    for cited, fitted in ((KERNEL_CITED_MS, False), (KERNEL_CITED_FIT, True))
    for index, stated in enumerate(cells(cited))
    if any(ch.isdigit() for ch in stated)
)
KERNEL_FIGURES = (
    *KERNEL_TABLE_FIGURES,
    Figure(
        doc=TIME_DOC,
        cited="`n½ = b / a = 1,504`",
        stated="1,504",
        run="kernels",
        read=lambda d: f"{kernel_fit(d)[1] / kernel_fit(d)[0]:,.0f}",
        what="kernel half-performance length, tokens",
    ),
    Figure(
        doc=TIME_DOC,
        cited="(3.1 ms at the 4.29 TB/s copy rate measured there)",
        stated="4.29",
        run="kernels",
        read=lambda d: f"{d['copy_bytes_per_s'] / 1e12:.2f}",
        what="H200 copy rate, TB/s",
    ),
    Figure(
        doc=TIME_DOC,
        cited="1.24e-10 s per attended pair",
        stated="1.24e-10",
        run="kernels",
        read=lambda d: f"{d['attention_s_per_pair_fwd_bwd'][-1][1]:.2e}",
        what="attention seconds per pair (32K, forward and backward)",
    ),
)

INTEGRATIONS_DOC = "docs/integrations.md"


def trl_table_lines(data: dict) -> list[str | None]:
    """docs/integrations.md's TRL step table (quiet, then two busy processes, then tokens), from
    ``bench_trl_step.py``; ``None`` for the rows of a run the JSON lacks (a quick run has no busy one)."""
    lines: list[str | None] = []
    for busy in (0, 2):
        run = trl_run(data, busy)
        if run is None:
            lines += [None, None]
            continue
        stock, ours = run["stock"], run["cpplan"]
        start, end = run["load_average_start"][0], run["load_average_end"][0]
        if busy == 0:
            label = f"quiet (load average {start:.2f} at the start, {end:.2f} at the end)"
            spread = "quiet: min–max s, ratio of each interleaved pair"
        else:
            label = f"{busy} busy processes (load average {start:.2f} → {end:.2f})"
            spread = f"{busy} busy processes: min–max s, pair ratios"
        medians = [
            f"{stock['median_step_s']:.3f}",
            f"{ours['median_step_s']:.3f}",
            f"**{run['speedup']:.2f}×**",
        ]
        lines.append(markdown_row([f"{label}: median s per step", *medians]))
        pairs = f"{min(run['pair_speedups']):.2f}–{max(run['pair_speedups']):.2f}×"
        ranges = [f"{t['min_step_s']:.2f}–{t['max_step_s']:.2f}" for t in (stock, ours)]
        lines.append(markdown_row([spread, *ranges, pairs]))
    first = data["runs"][0]
    padded, packed = sum(first["stock_padded_per_step"]), sum(first["cpplan_packed_per_step"])
    label = (
        f"tokens of the {len(first['cpplan_packed_per_step'])} timed steps' loss passes (TRL's padded "
        "`B × (P + C)`, cpplan's packed)"
    )
    return [*lines, markdown_row([label, f"{padded:,}", f"{packed:,}", f"{first['token_ratio']:.2f}×"])]


def trl_table_cell(data: dict, row: int, index: int) -> str:
    """One cell of the TRL step table from a run, or ``not run``."""
    line = trl_table_lines(data)[row]
    return "not run" if line is None else cells(line)[index]


def slowdown(data: dict, trainer: str) -> str:
    """How much ``trainer``'s median step slows beside two busy processes, as ``1.87``."""
    runs = [trl_run(data, b) for b in (0, 2)]
    if None in runs:
        return "not run"
    quiet, busy = (r[trainer]["median_step_s"] for r in runs)
    return f"{busy / quiet:.2f}"


TRL_FIGURES = (
    *(
        Figure(
            doc=INTEGRATIONS_DOC,
            cited=line,
            stated=cell,
            run="trl_step",
            read=lambda d, r=row, i=index: trl_table_cell(d, r, i),
            what=f"TRL step table, row {row + 1}, column {index + 1}",
        )
        for row, line in enumerate(table_lines(INTEGRATIONS_DOC, "| | stock TRL | cpplan | stock / cpplan |"))
        for index, cell in enumerate(cells(line))
    ),
    *(
        Figure(
            doc=INTEGRATIONS_DOC,
            cited="cpplan's step slows 1.65× beside the two busy processes, stock's 1.74×",
            stated=stated,
            run="trl_step",
            read=lambda d, t=trainer: slowdown(d, t),
            what=f"TRL step: {trainer} slowed by two busy processes",
        )
        for trainer, stated in (("cpplan", "1.65"), ("stock", "1.74"))
    ),
    Figure(
        doc=INTEGRATIONS_DOC,
        cited="planning is 50 ms of the profiled quiet step",
        stated="50",
        run="trl_step",
        read=lambda d: f"{trl_run(d, 0)['cpplan']['profile_s']['cpplan: plan'] * 1e3:.0f}",
        what="TRL step: cpplan's planning in the profiled quiet step, ms",
    ),
)


TINY_CITED = (
    "1,664 padded against 855 packed tokens over the timed steps, 1.95×): 0.124 s stock against 0.101 s"
    " cpplan per step quiet (**1.23×**, load average 0.77; pairs 1.03–1.55×) and 0.315 s against 0.125 s"
    " beside two busy processes (2.51×, pairs 1.48–2.99×)"
)
TRL_TINY_RUNS = (
    Run(
        name="trl_step_tiny",
        command=(PY, "benchmarks/bench_trl_step.py", "--tiny", "--output", "{out}"),
        quick_command=(PY, "benchmarks/bench_trl_step.py", "--tiny", "--quick", "--output", "{out}"),
    ),
)


def trl_figures(busy: int) -> dict[str, Callable[[dict], str]]:
    """Readers of one TRL step run (``busy`` busy processes beside it): medians, ratios, load."""

    def read(format_run: Callable[[dict], str]) -> Callable[[dict], str]:
        """``format_run`` applied to the run, or ``not run`` where the JSON lacks it (a quick run)."""
        return lambda d: "not run" if trl_run(d, busy) is None else format_run(trl_run(d, busy))

    return {
        "stock median s": read(lambda r: f"{r['stock']['median_step_s']:.3f}"),
        "cpplan median s": read(lambda r: f"{r['cpplan']['median_step_s']:.3f}"),
        "speed-up": read(lambda r: f"{r['speedup']:.2f}"),
        "pair ratios": read(lambda r: "–".join(f"{f(r['pair_speedups']):.2f}" for f in (min, max))),
    }


def _tiny(stated: str, what: str, read: Callable[[dict], str]) -> Figure:
    """One figure of the tiny TRL case in docs/integrations.md."""
    return Figure(
        doc=INTEGRATIONS_DOC, cited=TINY_CITED, stated=stated, run="trl_step_tiny", read=read, what=what
    )


TRL_TINY_FIGURES = (
    _tiny("1,664", "tiny: padded tokens", lambda d: f"{sum(d['runs'][0]['stock_padded_per_step']):,}"),
    _tiny("855", "tiny: packed tokens", lambda d: f"{sum(d['runs'][0]['cpplan_packed_per_step']):,}"),
    _tiny("1.95", "tiny: token ratio", lambda d: f"{d['runs'][0]['token_ratio']:.2f}"),
    _tiny("0.77", "tiny: load average, quiet", lambda d: f"{trl_run(d, 0)['load_average_start'][0]:.2f}"),
    *(
        _tiny(stated, f"tiny, {busy} busy: {key}", trl_figures(busy)[key])
        for busy, values in (
            (0, ("0.124", "0.101", "1.23", "1.03–1.55")),
            (2, ("0.315", "0.125", "2.51", "1.48–2.99")),
        )
        for key, stated in zip(trl_figures(busy), values, strict=True)
    ),
    Figure(
        doc=INTEGRATIONS_DOC,
        cited="cpplan's planning is 51 ms of the profiled quiet step",
        stated="51",
        run="trl_step_tiny",
        read=lambda d: f"{trl_run(d, 0)['cpplan']['profile_s']['cpplan: plan'] * 1e3:.0f}",
        what="tiny: cpplan's planning in the profiled quiet step, ms",
    ),
)


EQUAL_WAVES_RUNS = (
    Run(
        name="equal_waves",
        command=(PY, "benchmarks/bench_equal_waves.py", "--output", "{out}"),
        quick_command=(PY, "benchmarks/bench_equal_waves.py", "--quick", "--output", "{out}"),
    ),
)


def equal_waves_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/dynamic_cp.md's equal-waves table from ``bench_equal_waves.py``'s summary."""
    summary = data["summary"][key[0]]
    return markdown_row(
        [
            key[0],
            str(summary["cases"]),
            str(summary["slower_cases"]),
            f"{summary['geomean_ratio']:.4f}",
            f"{summary['worst_ratio']:.4f}",
        ]
    )


EQUAL_WAVES_FIGURES = table_figures(
    DYNAMIC_DOC,
    "| suite | cases | slower | geomean equal/unequal | worst |",
    run="equal_waves",
    num_keys=1,
    line_of=equal_waves_line,
    what="equal waves over unequal",
)


SHARING_RUNS = (
    Run(
        name="sharing_overhead",
        command=(PY, "benchmarks/bench_sharing_overhead.py", "--repeats", "5", "--output", "{out}"),
    ),
)


def sharing_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/time_model.md's sharing-overhead table from ``bench_sharing_overhead.py``."""
    hidden, layers = (int(v) for v in key[0].split(" (")[0].split(", "))
    size = next(
        z
        for z in data["sizes"]
        if (z["shape"]["hidden_size"], z["shape"]["num_hidden_layers"]) == (hidden, layers)
    )
    ratios = [f"{size['prompts'][p]['none_over_full']:.3f}" for p in ("14", "64")]
    segment = size["segment_tokens"]
    tokens = f"{segment:.0f}" if segment > 0 else f"(noise: {segment:.0f})"
    return markdown_row([key[0], *ratios, tokens])


SHARING_FIGURES = table_figures(
    TIME_DOC,
    "| hidden, layers | prompt 14 | prompt 64 | segment (tokens) |",
    run="sharing_overhead",
    num_keys=1,
    line_of=sharing_line,
    what="sharing overhead, none over full",
)


INTEGRATIONS_RUNS = (
    Run(name="integrations", command=(PY, "benchmarks/bench_integrations.py", "--output", "{out}")),
    Run(
        name="art_pack",
        command=(PY, "benchmarks/bench_art_pack.py", "--output", "{out}"),
        quick_command=(PY, "benchmarks/bench_art_pack.py", "--quick", "--repeats", "1", "--output", "{out}"),
    ),
)


def art_pack_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/integrations.md's ART packer table from ``bench_art_pack.py``'s JSON."""
    step, cp, seq_len = key[0], int(key[1]), int(key[2].replace(",", ""))
    r = next(r for r in data["rows"] if (r["step"], r["cp"], r["art_seq_len"]) == (step, cp, seq_len))
    return markdown_row(
        [
            *key,
            f"{r['art_rows']} / {r['cpplan_rows']}",
            f"{r['art_padded_tokens']:,} / {r['cpplan_padded_tokens']:,}",
            f"{r['art_padded_tokens'] / r['cpplan_padded_tokens']:.2f}",
            f"{r['art_step_s']:.2f} / {r['cpplan_step_s']:.2f}",
            f"{r['art_step_s'] / r['cpplan_step_s']:.2f}",
            f"{r['art_rows_over_budget']} of {r['art_rows']}",
            f"{r['art_pack_ms_median']:.0f} / {r['cpplan_pack_ms_median']:.0f}",
        ]
    )


def integration_case(data: dict, case: str) -> dict:
    """One case of ``bench_integrations.py``'s run."""
    return next(c for c in data["cases"] if c["case"] == case)


def integrations_line(data: dict, key: tuple[str, ...]) -> str:
    """One row of docs/integrations.md's gains table from ``bench_integrations.py``'s JSON."""
    c = integration_case(data, key[0])
    return markdown_row(
        [
            key[0],
            f"{c['trl_padded_tokens']:,}",
            f"{c['cpplan_packed_tokens']:,}",
            f"{c['trl_over_cpplan']:.2f}x",
            f"{c['flat_tokens']:,}",
            f"{c['verl_micro_batches']} ({c['verl_largest']:,})",
            f"{c['cpplan_micro_batches']} ({c['cpplan_largest']:,})",
            f"{c['cpplan_packed_tokens']:,} ({c['flat_tokens'] / c['cpplan_packed_tokens']:.2f}x fewer)",
        ]
    )


def gain_range(data: dict, over: str) -> tuple[str, str]:
    """The least and most token gain over the cases, as ``("1.4x", "8.9x")`` (``over``: trl or verl)."""
    gains = [
        c["trl_over_cpplan"] if over == "trl" else c["flat_tokens"] / c["cpplan_packed_tokens"]
        for c in data["cases"]
    ]
    return f"{min(gains):.1f}x", f"{max(gains):.1f}x"


TRL_GAIN_CITED = "A TRL user runs 1.4x (long completions) to 8.9x (long shared prompts) fewer tokens"
INTEGRATIONS_FIGURES = (
    *table_figures(
        INTEGRATIONS_DOC,
        "| step | CP | ART `seq_len` | rows ART / cpplan |",
        run="art_pack",
        num_keys=3,
        line_of=art_pack_line,
        what="ART packer",
    ),
    *table_figures(
        INTEGRATIONS_DOC,
        "| case | TRL padded | cpplan packed |",
        run="integrations",
        num_keys=1,
        line_of=integrations_line,
        what="integration gains",
    ),
    *(
        Figure(
            doc=INTEGRATIONS_DOC,
            cited=TRL_GAIN_CITED,
            stated=stated,
            run="integrations",
            read=lambda d, i=index: gain_range(d, "trl")[i],
            what=f"TRL: {'least' if index == 0 else 'most'} token gain",
        )
        for index, stated in enumerate(("1.4x", "8.9x"))
    ),
    Figure(
        doc=INTEGRATIONS_DOC,
        cited="(the last column, 1.1x to 8.7x)",
        stated="1.1x to 8.7x",
        run="integrations",
        read=lambda d: " to ".join(gain_range(d, "verl")),
        what="verl engine: token gain range",
    ),
    Figure(
        doc=INTEGRATIONS_DOC,
        cited="(10, the cap at 62,865 tokens binding in both)",
        stated="62,865",
        run="integrations",
        read=lambda d: f"{d['cases'][0]['cap_tokens']:,}",
        what="verl micro-batch token cap",
    ),
)


GDN_RUNS = (Run(name="gdn_modes", command=(PY, "benchmarks/bench_gdn_modes.py", "{out}")),)


def gdn_rows(data: dict) -> list[tuple[str, str, dict]]:
    """Every case × CP row of ``bench_gdn_modes.py``'s run."""
    return [(case, cp, row) for case, cps in data["rows"].items() for cp, row in cps.items()]


def gdn_ratio(row: dict) -> float:
    """A row's step over the same card's without head-parallel."""
    return row["cost_s"] / row["cost_s_two_modes"]


def gdn_cp8_range(data: dict) -> str:
    """The step ratios of the CP 8 rows that run a wave head-parallel, as ``0.86–0.98``."""
    ratios = [gdn_ratio(r) for _, cp, r in gdn_rows(data) if cp == "8" and r["modes"]["head_parallel"]]
    return f"{min(ratios):.2f}–{max(ratios):.2f}"


def long_tail_waves(data: dict, cp: str) -> str:
    """How many of the long tail's waves run head-parallel at ``cp``, as ``4 of 7``."""
    modes = data["rows"]["long_tail"][cp]["modes"]
    return f"{modes['head_parallel']} of {sum(modes.values())}"


def gdn_counts(data: dict) -> tuple[str, str, str]:
    """Rows choosing head-parallel, rows costlier than without it (``10 of 33``) and the worst increase."""
    rows = gdn_rows(data)
    chosen = sum(1 for _, _, r in rows if r["modes"]["head_parallel"])
    costlier = [gdn_ratio(r) for _, _, r in rows if gdn_ratio(r) > 1 + 1e-9]
    worst = f"+{(max(costlier) - 1) * 100:.1f}%" if costlier else "none"
    return f"{chosen} of {len(rows)}", f"{len(costlier)} of {len(rows)}", worst


def _gdn(cited: str, stated: str, read: Callable[[dict], str], what: str) -> Figure:
    """One figure of docs/time_model.md's GDN-mode paragraph."""
    return Figure(doc=TIME_DOC, cited=cited, stated=stated, run="gdn_modes", read=read, what=what)


GDN_FIGURES = (
    _gdn("a wave head-parallel (ratios 0.83–1.00)", "0.83–1.00", gdn_cp8_range, "CP 8 head-parallel steps"),
    _gdn(
        "(0 of 4 at CP 2 and 0 of 2 at CP 4",
        "0 of 4",
        lambda d: long_tail_waves(d, "2"),
        "long tail CP 2: head-parallel waves",
    ),
    _gdn(
        "(0 of 4 at CP 2 and 0 of 2 at CP 4",
        "0 of 2",
        lambda d: long_tail_waves(d, "4"),
        "long tail CP 4: head-parallel waves",
    ),
    _gdn(
        "5 of 33 case×CP rows choose it at least once",
        "5 of 33",
        lambda d: gdn_counts(d)[0],
        "rows choosing head-parallel",
    ),
    _gdn(
        "1 of 33 rows costs more than on the card without it (worst increase: +0.0%",
        "1 of 33",
        lambda d: gdn_counts(d)[1],
        "rows costlier with head-parallel offered",
    ),
    _gdn(
        "1 of 33 rows costs more than on the card without it (worst increase: +0.0%",
        "+0.0%",
        lambda d: gdn_counts(d)[2],
        "worst increase with head-parallel offered",
    ),
)


BUDGET_RUNS = (
    Run(name="budget", command=(PY, "benchmarks/bench_budget.py", "--output", "{out}"), quick_command=()),
)
NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def same_plans(data: dict) -> str:
    """How many steps of ``bench_budget.py``'s run have every profile's plan at one price, as ``nine``."""
    same = sum(len(set(row["cost_s"].values())) == 1 for row in data["rows"])
    return NUMBER_WORDS[same] if same < len(NUMBER_WORDS) else str(same)


BUDGET_FIGURES = (
    Figure(
        doc=BENCH_DOC,
        cited="on all nine steps the four plans cost the same",
        stated="nine",
        run="budget",
        read=same_plans,
        what="steps whose plans cost the same at 1x, 2x, 4x the default budget and offline",
    ),
)


COMPONENT_KEYS = {
    "attention, all-gather, CP8, 8K tokens per GPU (contiguous, even tokens)": (
        "attention_allgather_cp8_8k_per_gpu"
    ),
    "attention, zigzag, CP8, 8K tokens per GPU": "attention_zigzag_cp8_8k_per_gpu",
    "GDN layer, CP4, 32K tokens, rounds": "gdn_rounds_cp4_32k",
    "GDN layer, CP4, 32K tokens, parallel state passing": "gdn_parallel_cp4_32k",
    "GDN layer, CP4, 32K tokens, head-parallel": "gdn_head_parallel_cp4_32k",
}
"""docs/time_model.md's component rows and the ``components`` keys of ``cp_scaling.py``'s JSON."""


def component_figure(line: str) -> Figure:
    """The predicted CP efficiency of one component row of docs/time_model.md."""
    part, stated = cells(line)[:2]
    key = COMPONENT_KEYS[part]
    return Figure(
        doc=TIME_DOC,
        cited=line,
        stated=stated,
        run="cp_scaling",
        read=lambda d: f"{d['components'][key]:.2f}",
        what=f"predicted CP efficiency, {part}",
    )


COMPONENT_FIGURES = tuple(
    component_figure(line) for line in table_lines(TIME_DOC, "| part | predicted | published |")
)

RUNS = (
    FIRST_PASS_RUNS
    + RUNTIME_RUNS
    + MEMORY_RUNS
    + TIME_RUNS
    + GPU_RUNS
    + TRL_TINY_RUNS
    + EQUAL_WAVES_RUNS
    + SHARING_RUNS
    + INTEGRATIONS_RUNS
    + GDN_RUNS
    + BUDGET_RUNS
)
FIGURES = (
    README_FIGURES
    + bench_doc_table(BENCH_DOC, _table_of(BENCH_DOC))
    + BENCH_FIGURES
    + OTHER_DOC_FIGURES
    + DYNAMIC_FIGURES
    + LEARNING_FIGURES
    + RUNTIME_FIGURES
    + MEMORY_FIGURES
    + TIME_FIGURES
    + HELD_OUT_FIGURES
    + KERNEL_FIGURES
    + TRL_FIGURES
    + TRL_TINY_FIGURES
    + EQUAL_WAVES_FIGURES
    + SHARING_FIGURES
    + INTEGRATIONS_FIGURES
    + GDN_FIGURES
    + COMPONENT_FIGURES
    + BUDGET_FIGURES
)

RUNTIME_INPUTS = tuple(
    Input(doc=RUNTIME_DOC, text=text)
    for text in (
        "profile (0.1 s by default",
        "on the shared 2-core development machine",
        "1. **Made once, per run**",
        "2. **Per step**",
        "3. **Bad budgets**",
        "were measured on the 2-core machine",
        "seconds (0, negative, NaN,",
        "The README example at CP2 and 8 GiB",
        "load average 1.6–1.8): 20 steps per workload",
        "the `runtime` profile (0.1 s).",
        "| within budget + 20 ms |",
        "The workloads: `grpo8x8`, 8 prompts × 8 rollouts, one item per rollout (prompt 2–6K, completion"
        " 0.3–3K tokens); `agent6x4`, 6 tasks × 4 rollouts of three turns",
        "`grpo32x8`, 32 prompts × 8 rollouts",
        "`grpo16x4-shuffled`, 4 prompts × 16 rollouts",
        "ended within the budget + 20 ms",
        "(the same run): 40 items (5 GRPO groups of 8, one item per rollout), CP2, 8 layers,"
        " `--time-budget 0.05`, per-rank memory over 24 budgets",
        "never more than 1% costlier",
        "load average 0.6, five-minute, read after the run): CP4, 40 GiB per rank",
        "GRPO groups of 8 small rollouts, one item each (prompt 32–256, completion 16–128 tokens); `tiny`:"
        " prompt 8–32, completion 4–16; `one_item`: one item of 10,000 requests (a 4,000-token prompt",
        "the runtime profile (0.1 s: past",
        "of the 20,000 small items (1,024-item windows,",
        "above 512 items",
        "on every 64th token",
        "hashes of every 64th token at lengths 32K … 128,",
        "budget ≤ 0",
        "(prompts of 1K–8K tokens × 8 completions of 256–4K), Qwen3.6-35B-A3B, 80 GiB per rank, a kept"
        " runtime `Planner`, 0.1 s budget. At cp 8 the step grows from 1,024 to 16,384",
        "the same 128 completions (16 prompts). Per row, 3 rounds of 4 sampled ranks'",
        "up to 1,024 requests",
        "4. **A busy machine**",
        "its last 8 calls",
        "a core each on the 2-core machine, started 5 s before the first call",
        "| beside 2 busy processes |",
        "At 1,024 completions it takes about 80 ms",
        "(the other a 256-completion call at cp 4). On the 256-completion steps at cp 8 no",
        "stops after two tries, with one rank and then another left unaligned, instead of trying all eight",
        "(the bench suite's 704 plans are the same either way)",
        "up to 16,384 completions",
        "CP8 ended 11 and 3 ms past the budget: a step that a planner given the steps alone plans in about 90"
        " ms; in this benchmark's process (greedy timed alone between the calls) such a call overran in every"
        " run, at the twelfth or the thirteenth step",
        "--share-rows 1024x8x8,8192x64x8,16384x128x8",
        "at the fixed share (cp 8, five sizes)",
        "medians of 3 (JSON",
    )
)

INPUTS = FIRST_PASS_INPUTS + RUNTIME_INPUTS
