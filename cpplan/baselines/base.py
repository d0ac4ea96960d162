"""The interface every baseline implements, and the shared path from its decisions to a priced plan.

A baseline decides three things: which items run together (its packing), which prefix-tree nodes are
stored once (its layout: none, or a share mask) and which CP rank owns each chunk (its ownership rule).
:func:`build_plan` turns those decisions into a :class:`cpplan.plans.plan.Plan` of priced
:class:`cpplan.pricing.wave.WavePlan` s, so the evaluator prices and the verifier checks a baseline exactly as
it does cpplan's own plans. A wave over the budget is kept as it is and reported as an OOM: repairing
it would hide what the baseline does. :func:`run` (built on :func:`timed` and :func:`outcome_of`, which
``cpplan bench`` uses for every planner, cpplan's portfolio included) times a planner and reports its
:class:`Outcome`.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from cpplan.errors import NoFitError
from cpplan.plans.plan import Plan
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.ownership import ChunkStats, chunk_stats
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import WavePlan, price_wave
from cpplan.spec.units import format_bytes
from cpplan.verifier import Verification, verify_plan

OwnershipRule = Callable[[PackedLayout, ChunkStats, int], np.ndarray]
PlanFn = Callable[[Problem], Plan]
T = TypeVar("T")

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
    memory_bytes: int

    def __str__(self) -> str:
        return (
            f"wave {self.wave} rank {self.rank}: {self.peak_bytes:,} bytes ({format_bytes(self.peak_bytes)}) "
            f"over the budget of {self.memory_bytes:,} bytes ({format_bytes(self.memory_bytes)})"
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class Outcome:
    """One planner run on one problem: the plan (``None`` when the planner refused), its OOMs, the
    verifier's verdict and the wall seconds of each timed planning run.

    ``strategy`` is what made the plan (a baseline's name, or the strategy the portfolio picked);
    ``refusal`` the planner's :class:`~cpplan.errors.NoFitError` message when it refused.
    """

    name: str
    strategy: str
    plan: Plan | None
    ooms: tuple[Oom, ...] = ()
    verification: Verification | None = None
    plan_s: tuple[float, ...]
    refusal: str = ""

    @property
    def wall_s(self) -> float:
        """Seconds of the last timed run (the one that made :attr:`plan`)."""
        return self.plan_s[-1]

    @property
    def valid(self) -> bool:
        """The verifier found nothing wrong (so in particular no OOM)."""
        return self.verification is not None and self.verification.valid

    @property
    def status(self) -> str:
        """``valid``, ``oom`` (over the budget and nothing else wrong), ``invalid`` or ``refused``."""
        if self.plan is None:
            return "refused"
        if self.valid:
            return "valid"
        return "oom" if self.ooms and not self.other_violations else "invalid"

    @property
    def note(self) -> str:
        """Why the planner refused, or the first violation other than a budget violation."""
        others = self.other_violations
        return self.refusal or (others[0] if others else "")

    @property
    def budget_violations(self) -> tuple[tuple[int, int, int], ...]:
        """``(wave, rank, peak_bytes)`` of each budget violation the verifier reported."""
        found = []
        for text in self.verification.violations if self.verification else ():
            match = _BUDGET_VIOLATION.match(text)
            if match:
                wave, rank, peak = match.groups()
                found.append((int(wave), int(rank), int(peak.replace(",", ""))))
        return tuple(found)

    @property
    def other_violations(self) -> tuple[str, ...]:
        """Violations that are not budget violations (a correct baseline has none)."""
        return other_violations(self.verification) if self.verification else ()


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
    memory_bytes = problem.memory_bytes
    return tuple(
        Oom(wave=w, rank=int(r), peak_bytes=int(wave.prices.peak_bytes[r]), memory_bytes=memory_bytes)
        for w, wave in enumerate(plan.waves)
        for r in np.flatnonzero(wave.prices.peak_bytes > memory_bytes).tolist()
    )


def check(problem: Problem, plan: Plan) -> Verification:
    """The independent verifier over the plan's JSON form, as ``cpplan verify`` runs it."""
    return verify_plan(
        plan_to_dict(problem, plan),
        problem.workload,
        problem.card,
        problem.memory_bytes,
        chunk_tokens=problem.chunk_tokens,
    )


def run(baseline: Baseline, problem: Problem, *, repeats: int = 1) -> Outcome:
    """Plan with ``baseline`` (timed ``repeats`` times, each run cold), then report its OOMs and the
    verifier's verdict, or its refusal."""
    plan, plan_s, refusal = timed(baseline.plan, problem, repeats=repeats)
    return outcome_of(baseline.name, problem, plan, plan_s, strategy=baseline.name, refusal=refusal)


def outcome_of(
    name: str,
    problem: Problem,
    plan: Plan | None,
    plan_s: Sequence[float],
    *,
    strategy: str,
    refusal: NoFitError | None = None,
) -> Outcome:
    """The :class:`Outcome` of a timed run: ``plan`` with its OOMs and the verifier's verdict, or (when
    ``plan`` is ``None``) the planner's refusal."""
    if plan is None:
        return Outcome(name=name, strategy="", plan=None, plan_s=tuple(plan_s), refusal=str(refusal or ""))
    return Outcome(
        name=name,
        strategy=strategy,
        plan=plan,
        ooms=find_ooms(problem, plan),
        verification=check(problem, plan),
        plan_s=tuple(plan_s),
    )


def timed(
    plan: Callable[[Problem], T], problem: Problem, *, repeats: int = 1
) -> tuple[T | None, tuple[float, ...], NoFitError | None]:
    """Call ``plan`` ``repeats`` times, each on a :func:`cold_copy` of ``problem``: the last result, the
    wall seconds of each call, and the refusal that stopped the runs (then the result is ``None``)."""
    assert repeats >= 1, repeats
    plan_s: list[float] = []
    result = None
    for _ in range(repeats):
        fresh = cold_copy(problem)
        started = time.perf_counter()
        try:
            result = plan(fresh)
        except NoFitError as exc:
            plan_s.append(time.perf_counter() - started)
            return None, tuple(plan_s), exc
        plan_s.append(time.perf_counter() - started)
    return result, tuple(plan_s), None


def cold_copy(problem: Problem) -> Problem:
    """The same problem with a fresh, empty :class:`~cpplan.pricing.memo.PricingMemo` (token capacities
    included), so each timed run starts cold (the prefix tree, built with the problem, is shared)."""
    return dataclasses.replace(problem)


def item_tokens(problem: Problem) -> np.ndarray:
    """Unpacked tokens per item (what a token-budget sampler sees without prefix sharing)."""
    return np.array([item.num_tokens for item in problem.workload.items], dtype=np.int64)


def in_workload_order(bins: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each wave's items in workload order (the order the items are laid out in the packed sequence)."""
    return [sorted(int(i) for i in b) for b in bins if len(b)]
