"""The interface every baseline implements, and the shared path from its decisions to a priced plan.

A baseline decides three things: which items run together (its packing), which prefix-tree nodes are
stored once (its layout: none, or a share mask) and which CP rank owns each chunk (its ownership rule).
:func:`build_plan` turns those decisions into a :class:`cpplan.pricing.result.Plan` of priced
:class:`cpplan.pricing.wave.WavePlan` s, so the evaluator prices and the verifier checks a baseline exactly as
it does cpplan's own plans. A wave over the budget is kept as it is and reported as an OOM: repairing
it would hide what the baseline does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import ChunkStats, chunk_stats
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import Plan
from cpplan.pricing.serialize import plan_to_dict
from cpplan.pricing.wave import WavePlan, price_wave
from cpplan.spec.units import format_bytes
from cpplan.verifier import Verification, verify_plan

OwnershipRule = Callable[[PackedLayout, ChunkStats, int], np.ndarray]
PlanFn = Callable[[Problem], Plan]

_BUDGET_VIOLATION = re.compile(r"^wave (\d+) rank (\d+): predicted peak ([\d,]+) bytes exceeds the budget")


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """A named planner from another trainer, written from its published description."""

    name: str
    origin: str
    summary: str
    plan: PlanFn


@dataclass(frozen=True, kw_only=True)
class Oom:
    """A wave whose priced peak on one rank is over the budget."""

    wave: int
    rank: int
    peak_bytes: int
    budget_bytes: int

    def __str__(self) -> str:
        return (
            f"wave {self.wave} rank {self.rank}: {self.peak_bytes:,} bytes ({format_bytes(self.peak_bytes)}) "
            f"over the budget of {self.budget_bytes:,} bytes ({format_bytes(self.budget_bytes)})"
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class Outcome:
    """One planner run on one problem: the plan, its OOMs, the verifier's verdict and planning time."""

    name: str
    plan: Plan
    ooms: tuple[Oom, ...]
    verification: Verification
    wall_s: float

    @property
    def valid(self) -> bool:
        """The verifier found nothing wrong (so in particular no OOM)."""
        return self.verification.valid

    @property
    def budget_violations(self) -> tuple[tuple[int, int, int], ...]:
        """``(wave, rank, peak_bytes)`` of each budget violation the verifier reported."""
        found = []
        for text in self.verification.violations:
            match = _BUDGET_VIOLATION.match(text)
            if match:
                wave, rank, peak = match.groups()
                found.append((int(wave), int(rank), int(peak.replace(",", ""))))
        return tuple(found)

    @property
    def other_violations(self) -> tuple[str, ...]:
        """Violations that are not budget violations (a correct baseline has none)."""
        return other_violations(self.verification)


def other_violations(verification: Verification) -> tuple[str, ...]:
    """The verifier's violations other than a rank's peak over the budget."""
    return tuple(v for v in verification.violations if not _BUDGET_VIOLATION.match(v))


def build_plan(
    problem: Problem,
    name: str,
    waves: Sequence[Sequence[int]],
    *,
    layout: str | np.ndarray,
    ownership: OwnershipRule,
    layout_name: str | None = None,
) -> Plan:
    """Price each wave (item indices, in the given order) under one layout and one ownership rule."""
    cp = problem.topology.cp
    label = layout_name or (layout if isinstance(layout, str) else "custom")
    priced: list[WavePlan] = []
    for items in waves:
        items = [int(i) for i in items]
        assert items, "a baseline produced an empty wave"
        packed = problem.pack(items, layout)
        stats = chunk_stats(packed, problem.chunk_tokens)
        owner = np.asarray(ownership(packed, stats, cp), dtype=np.int64)
        assert owner.shape == (stats.num_chunks,) and (owner >= 0).all() and (owner < cp).all()
        priced.append(price_wave(problem, items, packed, label, owner))
    return Plan(strategy=name, waves=tuple(priced))


def find_ooms(problem: Problem, plan: Plan) -> tuple[Oom, ...]:
    """Every (wave, rank) whose priced peak is over the budget."""
    budget = problem.budget_bytes
    return tuple(
        Oom(wave=w, rank=int(r), peak_bytes=int(wave.prices.peak_bytes[r]), budget_bytes=budget)
        for w, wave in enumerate(plan.waves)
        for r in np.flatnonzero(wave.prices.peak_bytes > budget).tolist()
    )


def check(problem: Problem, plan: Plan) -> Verification:
    """The independent verifier over the plan's JSON form, as ``cpplan verify`` runs it."""
    return verify_plan(
        plan_to_dict(problem, plan),
        problem.workload,
        problem.card,
        problem.budget_bytes,
        chunk_tokens=problem.chunk_tokens,
    )


def run(baseline: Baseline, problem: Problem) -> Outcome:
    """Plan with ``baseline`` (timed), then report its OOMs and the verifier's verdict."""
    started = time.perf_counter()
    plan = baseline.plan(problem)
    wall = time.perf_counter() - started
    return Outcome(
        name=baseline.name,
        plan=plan,
        ooms=find_ooms(problem, plan),
        verification=check(problem, plan),
        wall_s=wall,
    )


def item_tokens(problem: Problem) -> np.ndarray:
    """Unpacked tokens per item (what a token-budget sampler sees without prefix sharing)."""
    return np.array([item.num_tokens for item in problem.workload.items], dtype=np.int64)


def in_workload_order(bins: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each wave's items in workload order (the order the items are laid out in the packed sequence)."""
    return [sorted(int(i) for i in b) for b in bins if len(b)]
