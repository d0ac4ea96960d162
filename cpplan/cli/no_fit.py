"""What would fit when nothing does: the budget the refused request needs, and a larger CP size."""

from __future__ import annotations

from dataclasses import replace

from cpplan.errors import InputError, NoFitError
from cpplan.planners.greedy import greedy_plan
from cpplan.pricing.problem import Problem
from cpplan.spec.topology import Topology
from cpplan.spec.units import format_bytes

LAYOUTS = ("full", "none")
MAX_CP_FACTOR = 8


def with_suggestions(exc: NoFitError, problem: Problem) -> NoFitError:
    """``exc`` with what would fit appended: ``--memory`` of at least the bytes the refused request
    needs, and the smallest CP size up to :data:`MAX_CP_FACTOR` times this one that fits the item
    within the same budget."""
    hints = []
    if exc.needed_bytes:
        hints.append(
            f"--memory {exc.needed_bytes:,} ({format_bytes(exc.needed_bytes)}) or more would fit it at "
            f"cp={problem.topology.cp}"
        )
    if exc.item in problem.workload.index_of:
        cp = fitting_cp(problem, exc.item)
        largest = min(problem.topology.cp * MAX_CP_FACTOR, 1024)
        hints.append(
            f"--topology with cp={cp} would fit it within the budget"
            if cp is not None
            else f"no CP size up to cp={largest} fits it within the budget"
        )
    if not hints:
        return exc
    return NoFitError(
        f"{exc}; {'; '.join(hints)}",
        item=exc.item,
        request=exc.request,
        rank=exc.rank,
        needed_bytes=exc.needed_bytes,
        memory_bytes=exc.memory_bytes,
    )


def fitting_cp(problem: Problem, item_id: str) -> int | None:
    """The smallest CP size (doubling, up to :data:`MAX_CP_FACTOR` times the problem's) under which the
    item alone has a plan within the budget, or ``None``."""
    alone = problem.workload.subset([item_id])
    cp = problem.topology.cp * 2
    while cp <= min(problem.topology.cp * MAX_CP_FACTOR, 1024):
        try:
            topology = Topology.create(**{**problem.topology.model_dump(), "cp": cp})
            settings = replace(problem.settings, topology=topology)
            greedy_plan(Problem.build(alone, settings), LAYOUTS)
        except (NoFitError, InputError):
            cp *= 2
            continue
        return cp
    return None
