"""Readable tables on standard error (rich), whole at the console's width: the terminal's, else
``COLUMNS``, else 80 columns."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from cpplan.plans.pool_schedule import dp_rank_of
from cpplan.plans.result import PlanResult, bound_sentence, seconds_text
from cpplan.pricing.wave import local_tokens
from cpplan.spec.units import format_bytes

PIPED_WIDTH = 80
"""Columns of the summary when standard error is not a terminal and ``COLUMNS`` is not set."""

UNBOUNDED_WIDTH = 100_000

_RUN_COLUMNS = ("wave", "items", "layout", "packed tokens", "logical tokens", "predicted seconds")
_MEMORY_COLUMNS = ("busiest rank", "its local tokens", "predicted peak", "of budget")
"""The wave table's columns, split where the table is too wide for one (the run, then the memory of each
wave's busiest rank). ``predicted`` marks the card's predictions (memory with the safety factor, step
time), never a measurement or the planner's own run time."""


def summary_console() -> Console:
    """A console on standard error as wide as the terminal; when piped, ``COLUMNS`` wide, or
    :data:`PIPED_WIDTH` without it."""
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else None
    if width is None and not sys.stderr.isatty():
        width = PIPED_WIDTH
    return Console(stderr=True, width=width)


def print_summary(result: PlanResult, console: Console | None = None) -> None:
    """Waves, packed vs logical tokens, busiest rank, peak vs budget, predicted seconds; candidates."""
    console = console or summary_console()
    problem = result.problem
    console.print(
        f"cpplan plan: {problem.card.name}, {problem.topology}, budget {format_bytes(problem.memory_bytes)} "
        "(peak and seconds: the card's predictions)"
    )
    for table in wave_tables(result, console):
        console.print(table)
    console.print(candidate_table(result))
    bound = bound_sentence(result.solver, result.cost_s)
    if bound:
        console.print(bound)
    console.print(
        f"chosen: {solver_line(result)}; planned in {result.wall_s * 1e3:.1f} ms (profile {result.profile})"
    )
    note = result.deadline_note()
    if note:
        console.print(f"note: {note}")


def solver_line(result: PlanResult) -> str:
    """The chosen strategy and what CP-SAT's stages did, in words (:meth:`PlanResult.decision`)."""
    return result.decision()


def wave_tables(result: PlanResult, console: Console) -> list[Table]:
    """The waves as one table when it fits the console's width, else as two: what runs where (items,
    layout, tokens, seconds) and the memory of each wave's busiest rank."""
    rows = wave_rows(result)
    where = _where_columns(result)
    whole = _table("waves", ("wave", *where, *_RUN_COLUMNS[1:], *_MEMORY_COLUMNS), rows)
    if _fits(whole, console):
        return [whole]
    return [
        _table("waves", ("wave", *where, *_RUN_COLUMNS[1:]), rows),
        _table("busiest rank of each wave", ("wave", *_MEMORY_COLUMNS), rows),
    ]


def wave_rows(result: PlanResult) -> list[dict[str, str]]:
    """One row per wave and a total, each cell by its column's name."""
    problem, plan = result.problem, result.plan
    budget = problem.memory_bytes
    rows = []
    for index, wave in enumerate(plan.waves):
        rank = wave.busiest_rank
        rows.append(
            {
                "wave": str(index),
                **_where(plan, index, problem.topology.dp),
                "items": str(len(wave.items)),
                "layout": wave.layout_name,
                "packed tokens": f"{wave.packed_tokens:,}",
                "logical tokens": f"{wave.logical_tokens:,}",
                "predicted seconds": seconds_text(wave.cost_s),
                "busiest rank": str(rank),
                "its local tokens": f"{int(local_tokens(wave)[rank]):,}",
                "predicted peak": format_bytes(wave.peak_bytes),
                "of budget": f"{wave.peak_bytes / budget:.1%}",
            }
        )
    total = {
        "wave": "total",
        "items": str(problem.num_items),
        "packed tokens": f"{plan.packed_tokens:,}",
        "logical tokens": f"{plan.logical_tokens:,}",
        "predicted seconds": seconds_text(plan.cost_s),
        "predicted peak": format_bytes(plan.peak_bytes),
        "of budget": f"{plan.peak_bytes / budget:.1%}",
    }
    return [*rows, total]


def _where_columns(result: PlanResult) -> tuple[str, ...]:
    """Where the waves run: pool GPUs and start times under a schedule, the replica at dp > 1, else
    nothing (one replica runs every wave)."""
    if result.plan.schedule is not None:
        return ("runs on GPUs", "starts at (s)")
    return ("dp replica",) if result.problem.topology.dp > 1 else ()


def _where(plan, index: int, dp: int) -> dict[str, str]:
    """The replica a wave runs on, or with a schedule its pool GPUs (``4-7``) and start time."""
    if plan.schedule is None:
        return {"dp replica": str(dp_rank_of(index, dp))}
    gpus, start = plan.schedule.gpus[index], plan.schedule.start_s[index]
    return {
        "runs on GPUs": str(gpus[0]) if len(gpus) == 1 else f"{gpus[0]}-{gpus[-1]}",
        "starts at (s)": f"{start:.3f}",
    }


def _table(title: str, columns: Sequence[str], rows: list[dict[str, str]]) -> Table:
    """A table of ``columns`` (every cell's width its column's least, so only headers wrap), the last
    row a total set apart."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in columns:
        cells = [row.get(column, "") for row in rows]
        table.add_column(
            Text(column, no_wrap=False),
            justify="left" if column == "layout" else "right",
            min_width=max(map(len, cells)),
            overflow="fold",
        )
    for row in rows[:-1]:
        table.add_row(*(row.get(column, "") for column in columns))
    table.add_section()
    table.add_row(*(rows[-1].get(column, "") for column in columns))
    return table


def _fits(table: Table, console: Console) -> bool:
    """Whether ``table`` is whole at the console's width, its headers wrapped where they need to be."""
    unbounded = console.options.update_width(UNBOUNDED_WIDTH)  # else the measure is clamped to the width
    return Measurement.get(console, unbounded, table).minimum <= console.width


def candidate_table(result: PlanResult) -> Table:
    """Every strategy the portfolio ran: its plan's predicted seconds, waves, validity and why it lost."""
    title = "candidates (predicted seconds: each plan's step time by the card, not the solve time)"
    rows = [
        {
            "strategy": c.strategy,
            "predicted seconds": "-" if c.cost_s is None else seconds_text(c.cost_s),
            "waves": "-" if c.num_waves is None else str(c.num_waves),
            "valid": "yes" if c.valid else "no",
        }
        for c in result.candidates
    ]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("strategy", "predicted seconds", "waves", "valid"):
        table.add_column(
            Text(column, no_wrap=False), min_width=max((len(row[column]) for row in rows), default=0)
        )
    table.add_column("reason", ratio=1, overflow="fold")
    for row, c in zip(rows, result.candidates, strict=True):
        table.add_row(*row.values(), c.reason)
    return table
