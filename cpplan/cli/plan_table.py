"""Readable tables on standard error (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from cpplan.plans.pool_schedule import dp_rank_of
from cpplan.plans.result import PlanResult, bound_sentence
from cpplan.pricing.wave import local_tokens
from cpplan.spec.units import format_bytes


def _is_terminal() -> bool:
    import sys

    return sys.stderr.isatty()


_WAVE_COLUMNS = (
    "wave",
    "dp replica",
    "items",
    "layout",
    "packed",
    "logical",
    "busiest rank",
    "local tokens",
    "predicted peak",
    "of budget",
    "predicted seconds",
)
"""The wave table's columns: ``predicted`` marks the card's predictions (memory with the safety factor, step
time), never a measurement or the planner's own run time."""


def print_summary(result: PlanResult, console: Console | None = None) -> None:
    """Waves, packed vs logical tokens, busiest rank, peak vs budget, predicted seconds; candidates."""
    console = console or Console(stderr=True, width=None if _is_terminal() else 140)
    console.print(wave_table(result))
    console.print(candidate_table(result))
    console.print(
        f"chosen: {solver_line(result)}; planned in {result.wall_s * 1e3:.1f} ms (profile {result.profile})"
    )
    bound = bound_sentence(result.solver, result.cost_s)
    if bound:
        console.print(bound)
    note = result.deadline_note()
    if note:
        console.print(f"note: {note}")


def solver_line(result: PlanResult) -> str:
    """The chosen strategy and what CP-SAT's stages did, in words (:meth:`PlanResult.decision`)."""
    return result.decision()


def _where(plan, index: int, dp: int) -> tuple[str, ...]:
    """The replica a wave runs on, or with a schedule its pool GPUs (``GPUs 4-7``) and start time."""
    if plan.schedule is None:
        return (str(dp_rank_of(index, dp)),)
    gpus, start = plan.schedule.gpus[index], plan.schedule.start_s[index]
    ranks = f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {gpus[0]}-{gpus[-1]}"
    return ranks, f"{start:.3f} s"


def wave_table(result: PlanResult) -> Table:
    """One row per wave and a total."""
    problem, plan = result.problem, result.plan
    memory_bytes = problem.memory_bytes
    table = Table(
        title=f"cpplan plan: {problem.card.name}, {problem.topology}, budget {format_bytes(memory_bytes)} "
        "(peak and seconds: the card's predictions)",
        title_justify="left",
    )
    columns = _WAVE_COLUMNS if plan.schedule is None else ("wave", "runs on", "starts at", *_WAVE_COLUMNS[2:])
    for column in columns:
        table.add_column(column, justify="left" if column == "layout" else "right")
    for index, wave in enumerate(plan.waves):
        rank = wave.busiest_rank
        table.add_row(
            str(index),
            *_where(plan, index, problem.topology.dp),
            str(len(wave.items)),
            wave.layout_name,
            f"{wave.packed_tokens:,}",
            f"{wave.logical_tokens:,}",
            str(rank),
            f"{int(local_tokens(wave)[rank]):,}",
            format_bytes(wave.peak_bytes),
            f"{wave.peak_bytes / memory_bytes:.1%}",
            f"{wave.cost_s:.4f}",
        )
    table.add_section()
    table.add_row(
        "total",
        *([""] * (len(columns) - len(_WAVE_COLUMNS) + 1)),
        str(problem.num_items),
        "",
        f"{plan.packed_tokens:,}",
        f"{plan.logical_tokens:,}",
        "",
        "",
        format_bytes(plan.peak_bytes),
        f"{plan.peak_bytes / memory_bytes:.1%}",
        f"{plan.cost_s:.4f}",
    )
    return table


def candidate_table(result: PlanResult) -> Table:
    """Every strategy the portfolio ran: its plan's predicted seconds, waves, validity and why it lost."""
    title = "candidates (predicted seconds: each plan's step time by the card, not the solve time)"
    table = Table(title=title, title_justify="left")
    for column in ("strategy", "predicted seconds", "waves", "valid", "reason"):
        table.add_column(column)
    for c in result.candidates:
        table.add_row(
            c.strategy,
            "-" if c.cost_s is None else f"{c.cost_s:.4f}",
            "-" if c.num_waves is None else str(c.num_waves),
            "yes" if c.valid else "no",
            c.reason,
        )
    return table
