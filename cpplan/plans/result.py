"""The portfolio's answer: the chosen plan with every candidate, the solver's statistics and timings,
its plan JSON and a summary."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cpplan.plans.outcome import Scope
from cpplan.plans.plan import Candidate, Plan, SolverStats
from cpplan.plans.plan_writer import full_plan_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import local_tokens
from cpplan.spec.units import format_bytes

SUMMARY_WIDTH = 80
"""The widest line of :meth:`PlanResult.summary` unless told."""


@dataclass(frozen=True, kw_only=True, eq=False)
class PlanResult:
    """The portfolio's answer: the chosen plan, every candidate, solver statistics and timings."""

    problem: Problem
    plan: Plan
    candidates: tuple[Candidate, ...]
    solver: SolverStats
    profile: str
    wall_s: float

    @property
    def cost_s(self) -> float:
        """Predicted seconds of the chosen plan."""
        return self.plan.cost_s

    @property
    def strategy(self) -> str:
        """The strategy whose plan won."""
        return self.plan.strategy

    @property
    def bound_s(self) -> float | None:
        """The solver's proven lower bound, when it ran (what it bounds: ``solver.bound_scope``)."""
        return self.solver.bound_s

    def decision(self) -> str:
        """In a user's words, from the typed outcomes alone: which strategy's plan was chosen at what
        predicted cost, which stage decided it, who tied with it, and how far it is proved from the
        best plan (and of which plans that bound is)."""
        chosen = self.plan
        head = f"{chosen.strategy} at {seconds_text(chosen.cost_s)} s predicted"
        ties = [
            c.strategy
            for c in self.candidates
            if c.valid and c.strategy != chosen.strategy and c.cost_s == chosen.cost_s
        ]
        tied = f" ({', '.join(ties)} tied with it)" if ties else ""
        cpsat = next((c for c in self.candidates if c.strategy == "cpsat"), None)
        deciding = self.solver.deciding
        if chosen.strategy == "cpsat":
            return f"{head}{tied}, decided by CP-SAT: {self._cpsat_words()}"
        if cpsat is None or deciding is None:
            return f"{head}{tied}; CP-SAT did not run"
        if cpsat.cost_s is None:
            return f"{head}{tied}; CP-SAT gave no plan: {self._cpsat_words()}"
        if not cpsat.valid:
            return f"{head}{tied}; CP-SAT's plan was rejected by the verifier: {self._cpsat_words()}"
        own = seconds_text(cpsat.cost_s)
        return f"{head}{tied}, cheaper than CP-SAT's plan at {own} s: {self._cpsat_words()}"

    def _cpsat_words(self) -> str:
        """What CP-SAT's stages did, from the outcomes (what the bound proves is :func:`bound_sentence`)."""
        outcomes = self.solver.outcomes
        said = "; ".join(o.words() for o in outcomes) or "no model ran"
        return said

    def deadline_note(self) -> str | None:
        """A plain sentence when the wall-clock deadline cut the search (``None`` when it did not): how
        many items the chosen plan packed in a hurry with full sharing, which strategies never ran,
        and what that may cost."""
        hurried = [m for note in self.plan.notes if (m := _HURRIED.search(note))]
        skipped = [c.strategy for c in self.candidates if c.reason.startswith(_SKIPPED)]
        if not hurried and not skipped:
            return None
        parts = []
        if hurried:
            done, total = int(hurried[0]["done"]), int(hurried[0]["total"])
            parts.append(
                f"deadline cut the search after {done} of {total} items: {total - done} items packed "
                "at once with full sharing (no wave-width search, no layout choice)"
            )
        else:
            parts.append("deadline cut the search")
        if skipped:
            parts.append(f"not run for lack of time: {', '.join(skipped)}")
        return (
            "; ".join(parts) + f". The plan may be costlier than the full search's (profile {self.profile}: "
            "for a plan that does not depend on machine load use --solver deterministic, or give more "
            "--time-budget)."
        )

    def to_dict(self) -> dict[str, Any]:
        """The plan JSON, exactly as ``cpplan plan --output`` writes it."""
        return full_plan_dict(
            self.problem,
            self.plan,
            profile=self.profile,
            solver=self.solver,
            candidates=self.candidates,
            wall_s=self.wall_s,
        )

    def summary(self, width: int = SUMMARY_WIDTH) -> str:
        """A few lines, none wider than ``width``: strategy, waves and seconds, the proven gap, what
        decided, tokens, busiest rank, peak against budget (a sentence too long for a line goes on in
        the next, indented)."""
        plan, budget = self.plan, self.problem.memory_bytes
        busiest = max(plan.waves, key=lambda w: w.peak_bytes)
        tokens = local_tokens(busiest)
        bound = bound_sentence(self.solver, plan.cost_s)
        lines = [
            f"strategy {plan.strategy}: {plan.num_waves} wave(s), predicted {seconds_text(plan.cost_s)} s "
            f"(planned in {self.wall_s * 1e3:.1f} ms, profile {self.profile})",
            *([bound] if bound else []),
            f"chosen: {self.decision()}",
            f"tokens: {plan.packed_tokens:,} packed of {plan.logical_tokens:,} logical "
            f"({plan.packed_tokens / max(plan.logical_tokens, 1):.1%})",
            f"busiest rank: {busiest.busiest_rank} of wave {plan.waves.index(busiest)}, "
            f"{int(tokens[busiest.busiest_rank]):,} local tokens, peak {format_bytes(busiest.peak_bytes)} "
            f"of {format_bytes(budget)} ({busiest.peak_bytes / budget:.1%})",
        ]
        note = self.deadline_note()
        said = [*lines, note] if note else lines
        return "\n".join(
            textwrap.fill(line, width, subsequent_indent="  ", break_on_hyphens=False) for line in said
        )


def seconds_text(seconds: float) -> str:
    """A predicted price in seconds as the summaries print it: four decimals, rounded to nearest."""
    return f"{seconds:.4f}"


def bound_text(bound_s: float) -> str:
    """A lower bound in seconds at four decimals, rounded down: never above a price it bounds as
    :func:`seconds_text` prints that price."""
    text = f"{bound_s:.4f}"
    if float(text) > bound_s:
        text = f"{Decimal(text) - Decimal('0.0001'):.4f}"
    return text


def bound_sentence(solver: SolverStats, cost_s: float) -> str | None:
    """How far a plan priced ``cost_s`` is from the best possible plan under the cost model, in plain
    words, when the solver's bound says (``None`` without a bound)."""
    bound = solver.bound_s
    if bound is None or cost_s <= 0:
        return None
    gap = max(0.0, (cost_s - bound) / cost_s)
    if solver.bound_scope is Scope.MODEL:
        if bound > cost_s:  # the model prices in rounded-up units: its bound may pass the exact price
            said = "in its units, rounded up: above this plan's exact price"
        else:
            said = f"{bound_text(bound)} s"
        return (
            f"bound: CP-SAT's bound ({said}) is of its own conservative model only; nothing bounds this "
            "plan here"
        )
    if solver.bound_scope is Scope.ALL_PLANS:
        floor = f"no valid plan costs less than {bound_text(bound)} s"
        if gap <= 1e-9:
            return f"bound: proven gap 0%: {floor}, so this plan is the best possible under the cost model"
        return (
            f"bound: proven gap at most {gap:.2%}: {floor}, so the best possible plan under the cost model "
            f"saves at most {gap:.2%} of this plan's time"
        )
    return (
        f"bound: at most {gap:.2%} from the best plan made of the waves the planners proposed (at least "
        f"{bound_text(bound)} s); a plan of other waves may cost less: nothing bounds every plan here"
    )


_HURRIED = re.compile(r"deadline reached after (?P<done>\d+) of (?P<total>\d+) items")
"""Greedy's note when its deadline made it pack the rest at once (``greedy_plan``)."""
_SKIPPED = "skipped: no time left"
"""A candidate's reason when the portfolio never started it (:data:`cpplan.planners.deadline.NO_TIME`)."""


__all__ = ["PlanResult", "bound_sentence", "bound_text", "seconds_text"]
