"""Immutable results: a plan (its waves), the portfolio's candidates, solver statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cpplan.pricing.problem import Problem
from cpplan.pricing.schedule import Schedule
from cpplan.pricing.wave import WavePlan, local_tokens
from cpplan.spec.units import format_bytes


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """Waves in execution order, produced by one strategy, priced by the evaluator; with a
    ``schedule`` (a pool of several CP groups: ``dp > 1`` or dynamic CP), also where and when each
    wave runs."""

    strategy: str
    waves: tuple[WavePlan, ...]
    schedule: Schedule | None = None
    notes: tuple[str, ...] = ()
    """What the strategy says about this plan (say, that the deadline cut its search short); the
    portfolio adds them to the candidate's reason."""

    def __post_init__(self) -> None:
        assert self.schedule is None or len(self.schedule.gpus) == len(self.waves), "one placement per wave"

    @property
    def cost_s(self) -> float:
        """Predicted seconds: the schedule's makespan, or without one the sum of the waves' costs."""
        if self.schedule is not None:
            return self.schedule.makespan_s
        return math.fsum(w.cost_s for w in self.waves)

    @property
    def num_waves(self) -> int:
        """Number of waves."""
        return len(self.waves)

    @property
    def packed_tokens(self) -> int:
        """Packed tokens over all waves."""
        return sum(w.packed_tokens for w in self.waves)

    @property
    def logical_tokens(self) -> int:
        """Unpacked tokens over all waves."""
        return sum(w.logical_tokens for w in self.waves)

    @property
    def peak_bytes(self) -> int:
        """The largest predicted rank peak over all waves."""
        return max(w.peak_bytes for w in self.waves)

    @property
    def busiest_over_mean(self) -> float:
        """Rank imbalance over the step: the sum of each wave's busiest-rank local tokens over the sum
        of its mean."""
        busiest = sum(float(local_tokens(w).max()) for w in self.waves)
        mean = sum(float(local_tokens(w).mean()) for w in self.waves)
        return busiest / max(mean, 1e-9)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One strategy's outcome in the portfolio: its cost, whether it verified, and why it lost."""

    strategy: str
    cost_s: float | None
    valid: bool
    reason: str
    wall_s: float
    num_waves: int | None = None


@dataclass(frozen=True, kw_only=True)
class SolverStats:
    """What the CP-SAT backend reports: status, objective, proven bound, gap, times and model size.

    The joint model is conservative (its per-rank memory rows bound the exact ones from above), so its
    objective, bound and gap are the *model's*: ``optimal`` means optimal in the model, and a plan
    outside it (the exact evaluator admits more) may cost less. Nothing here bounds the plan itself."""

    status: str
    """CP-SAT's status on its model (``optimal`` / ``feasible`` there), or why it did not run."""
    objective_s: float | None = None
    """The model's objective of the answer, in seconds."""
    bound_s: float | None = None
    """The model's proven lower bound, in seconds: a bound of the conservative model's optimum, not of
    every plan."""
    gap: float | None = None
    """``(objective - bound) / objective`` in the model (kept for compatibility: see :attr:`model_gap`)."""
    model_gap: float | None = None
    """The same gap, named for what it is: the model's, not the plan's."""
    wall_s: float = 0.0
    deterministic_time: float | None = None
    num_booleans: int = 0
    num_integers: int = 0
    num_constraints: int = 0
    ortools_version: str = ""
    stage_s: dict[str, float] = field(default_factory=dict)


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
        """The solver's proven lower bound, when it ran."""
        return self.solver.bound_s

    def to_dict(self) -> dict[str, Any]:
        """The plan JSON, exactly as ``cpplan plan --output`` writes it."""
        from cpplan.pricing.serialize import result_to_dict  # serialize reads these types

        return result_to_dict(self)

    def summary(self) -> str:
        """A few lines: strategy, waves, tokens, busiest rank, peak against budget, seconds."""
        plan, budget = self.plan, self.problem.memory_bytes
        busiest = max(plan.waves, key=lambda w: w.peak_bytes)
        tokens = local_tokens(busiest)
        lines = [
            f"strategy {plan.strategy}: {plan.num_waves} wave(s), predicted {plan.cost_s:.4f} s "
            f"(planned in {self.wall_s * 1e3:.1f} ms, profile {self.profile})",
            f"tokens: {plan.packed_tokens:,} packed of {plan.logical_tokens:,} logical "
            f"({plan.packed_tokens / max(plan.logical_tokens, 1):.1%})",
            f"busiest rank: {busiest.busiest_rank} of wave {plan.waves.index(busiest)}, "
            f"{int(tokens[busiest.busiest_rank]):,} local tokens, peak {format_bytes(busiest.peak_bytes)} "
            f"of {format_bytes(budget)} ({busiest.peak_bytes / budget:.1%})",
        ]
        return "\n".join(lines)


def dp_rank_of(wave_index: int, dp: int) -> int:
    """The replica of a wave of a plan without a schedule: dealt round-robin (plans priced under
    ``dp > 1`` carry a :class:`Schedule` whose ``gpus`` say where each wave runs instead)."""
    return wave_index % dp


__all__ = ["Candidate", "Plan", "PlanResult", "SolverStats", "dp_rank_of"]
