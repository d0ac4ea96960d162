"""``cpplan bench --sensitivity``: which uncertain time constant would change the plan.

Every constant of the time model that is an estimate or a measurement on other hardware
(:data:`KNOBS`) is scaled by ½ and by 2, one at a time. For each suite workload, cpplan's portfolio
plans every fixed CP size ``c`` of a pool of :data:`POOL` GPUs (``Topology(cp=c, dp=POOL / c)``) under
the scaled card; the *chosen* plan is the cheapest over the sizes. The report says, per workload and
knob, how its predicted step seconds move against the unscaled card's choice and whether its CP size,
its layouts or its number of waves change. The default profile is ``deterministic``: a time-budgeted
profile would let the machine's load, not the factor, move the plan.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cpplan.api import build_problem, solve
from cpplan.bench.suites import Case, suite
from cpplan.errors import NoFitError
from cpplan.spec.card import ModelCard, load_model
from cpplan.spec.profile import load_solver
from cpplan.spec.topology import Topology
from cpplan.spec.units import parse_bytes

POOL = 8
FACTORS = (0.5, 2.0)


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One uncertain time constant: the card names it scales together (constants or hardware fields;
    a name the card lacks is skipped), and why it is uncertain."""

    name: str
    names: tuple[str, ...]
    why: str


KNOBS: tuple[Knob, ...] = (
    Knob(
        name="gdn_recurrence",
        names=("gdn_bench_forward_s", "gdn_bench_forward_backward_s"),
        why="fla's H800 benchmark, head count inferred (estimate)",
    ),
    Knob(name="gdn_call_floor", names=("gdn_call_floor_s",), why="launch floor from another GPU and shape"),
    Knob(name="kernel_half_tokens", names=("kernel_half_tokens",), why="one H200 run, eager kernels"),
    Knob(name="mfu_gemm", names=("mfu_gemm", "mfu"), why="one H200 run, uniform routing"),
    Knob(name="mfu_attention", names=("mfu_attention",), why="measured at 8K and 32K only"),
    Knob(
        name="interconnect",
        names=("interconnect_bytes_per_s", "all_to_all_bytes_per_s"),
        why="nccl-tests all-gather figure and DeepEP's all-to-all ratio, not this cluster",
    ),
    Knob(
        name="collective_latency",
        names=("collective_base_s", "collective_step_s"),
        why="NCCL's cost model, not a measurement",
    ),
)


def scaled_card(card: ModelCard, knob: Knob, factor: float) -> ModelCard:
    """``card`` with every constant or hardware field ``knob`` names multiplied by ``factor``."""
    constants = {k: v * factor if k in knob.names else v for k, v in card.constants.items()}
    hardware = card.hardware.model_copy(
        update={k: getattr(card.hardware, k) * factor for k in knob.names if hasattr(card.hardware, k)}
    )
    return card.model_copy(update={"constants": constants, "hardware": hardware})


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The chosen plan of one workload under one card: its CP size, predicted step seconds, waves and
    layouts (``layout x waves``, most used first)."""

    cp: int | None
    cost_s: float | None
    num_waves: int | None
    layouts: str


def choose(workload, card: ModelCard, memory_bytes: int, profile, sizes: Sequence[int]) -> Choice:
    """The cheapest of cpplan's plans over the fixed CP sizes ``sizes`` of the pool."""
    best: Choice = Choice(cp=None, cost_s=None, num_waves=None, layouts="")
    for cp in sizes:
        problem = build_problem(
            workload, topology=Topology(cp=cp, dp=POOL // cp), model=card, memory_bytes=memory_bytes
        )
        try:
            result = solve(problem, profile)
        except NoFitError:
            continue
        plan = result.plan
        if best.cost_s is None or plan.cost_s < best.cost_s:
            counts = Counter(w.layout_name for w in plan.waves).most_common()
            layouts = ", ".join(f"{name} x{n}" for name, n in counts)
            best = Choice(cp=cp, cost_s=float(plan.cost_s), num_waves=plan.num_waves, layouts=layouts)
    return best


def run_sensitivity(
    *,
    quick: bool = False,
    model: str = "qwen3.6-35b-a3b",
    memory: str = "40GiB",
    solver: str = "deterministic",
    sizes: Sequence[int] = (1, 2, 4, 8),
    knobs: Sequence[Knob] = KNOBS,
    cases: Sequence[Case] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every workload's chosen plan under the card and under each knob at each factor (JSON-ready)."""
    started = time.perf_counter()
    card, profile, budget = load_model(model), load_solver(solver), parse_bytes(memory)
    rows: list[dict[str, Any]] = []
    for case in cases if cases is not None else suite(quick=quick):
        workload = case.build()
        base = choose(workload, card, budget, profile, sizes)
        rows.append({"case": case.name, "knob": "", "factor": 1.0, **asdict(base)})
        for knob in knobs:
            for factor in FACTORS:
                found = choose(workload, scaled_card(card, knob, factor), budget, profile, sizes)
                rows.append({"case": case.name, "knob": knob.name, "factor": factor, **_moved(base, found)})
                if progress is not None:
                    progress(f"{case.name} {knob.name} x{factor:g}: {_describe(rows[-1])}")
    return {
        "settings": {
            "quick": quick,
            "model": card.name,
            "memory": memory,
            "solver": profile.name,
            "pool": POOL,
            "sizes": list(sizes),
            "factors": list(FACTORS),
            "knobs": [asdict(k) for k in knobs],
        },
        "wall_s": time.perf_counter() - started,
        "rows": rows,
    }


def _moved(base: Choice, found: Choice) -> dict[str, Any]:
    """``found`` with how it differs from ``base``: the step time's change and which choices moved."""
    change = None
    if base.cost_s and found.cost_s is not None:
        change = found.cost_s / base.cost_s - 1.0
    return {
        **asdict(found),
        "cost_change": change,
        "cp_moved": found.cp != base.cp,
        "layouts_moved": found.layouts != base.layouts,
        "waves_moved": found.num_waves != base.num_waves,
    }


def _describe(row: dict[str, Any]) -> str:
    cost = "-" if row["cost_s"] is None else f"{row['cost_s']:.3f} s"
    return f"cp {row['cp']} {cost} waves {row['num_waves']}"


def format_sensitivity(result: dict[str, Any]) -> str:
    """The report as a Markdown table: per workload and knob, the step time at ½ and 2 against the
    card's choice, and the choices that moved (``cp``, ``layout``, ``waves``)."""
    lines = [
        "| workload | knob | x0.5: step | moved | x2: step | moved |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows = result["rows"]
    for base in (r for r in rows if not r["knob"]):
        lines.append(
            f"| {base['case']} | (card) | {_cost(base['cost_s'])}, cp {base['cp']}, {base['num_waves']} waves"
            f" ({base['layouts']}) | | | |"
        )
        for knob in result["settings"]["knobs"]:
            pair = [r for r in rows if r["case"] == base["case"] and r["knob"] == knob["name"]]
            cells = []
            for row in sorted(pair, key=lambda r: r["factor"]):
                change = "-" if row["cost_change"] is None else f"{row['cost_change']:+.1%}"
                cells.append(f"{_cost(row['cost_s'])} ({change}) | {_moves(row)}")
            lines.append(f"| {base['case']} | {knob['name']} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _cost(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _moves(row: dict[str, Any]) -> str:
    moved = [
        f"cp {row['cp']}" if row["cp_moved"] else "",
        "layout" if row["layouts_moved"] else "",
        f"{row['num_waves']} waves" if row["waves_moved"] else "",
    ]
    return ", ".join(m for m in moved if m) or "none"
