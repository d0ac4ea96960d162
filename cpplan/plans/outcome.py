"""Typed outcomes of the planner: how each strategy's run ended (:class:`Ended`) and one record per
CP-SAT model run (:class:`ModelOutcome`), not strings.

Every stage that runs a model (the joint model, its large-neighbourhood search, the ownership model, the
schedule model) leaves a :class:`ModelOutcome`: which model, a :class:`Status`, the objective and the
proven bound in seconds with the bound's scope, and, where the stage's own answer was not what it
returned, what it kept instead and why. The plan JSON writes them as ``solver.outcomes``; the CLI's
summary line and :meth:`~cpplan.plans.result.PlanResult.summary` are written from them alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    """How one model run ended (CP-SAT's statuses, and why a model did not run)."""

    OPTIMAL = "optimal"
    """Proved optimal in its model."""
    FEASIBLE = "feasible"
    """An answer, not proved optimal within its limit."""
    INFEASIBLE = "infeasible"
    """The model has no solution."""
    UNKNOWN = "unknown"
    """No answer within its limit."""
    MODEL_INVALID = "model_invalid"
    """CP-SAT refused the model (a defect: the record's detail says what CP-SAT said)."""
    SKIPPED = "skipped"
    """Not run, by rule (the detail says which: too many items, a split item, ...)."""
    NO_TIME = "no_time"
    """Not run: too little of the budget was left for it."""
    NOT_RUN = "not_run"
    """The profile does not run it."""
    FAILED = "failed"
    """Not run to an end: building or running it raised an error (the detail says which)."""

    @property
    def answered(self) -> bool:
        """Whether the run produced an answer."""
        return self in (Status.OPTIMAL, Status.FEASIBLE)


class Ended(StrEnum):
    """How one strategy's run ended (the typed form of its note; the model runs inside a strategy have
    their own :class:`Status`)."""

    PLANNED = "planned"
    """It returned a plan (the verifier's verdict says whether it is valid)."""
    NO_TIME = "no_time"
    """Not started, or its deciding model not run: too little of the budget was left."""
    UNAVAILABLE = "unavailable"
    """No backend is registered under its name."""
    REFUSED = "refused"
    """It refused the problem (a :class:`NoFitError`: something does not fit)."""
    FAILED = "failed"
    """It raised an error, or returned a plan the verifier cannot read."""
    NO_PLAN = "no_plan"
    """It ran and returned no plan (its statistics say why)."""


class Scope(StrEnum):
    """What a proven bound is a lower bound of."""

    ALL_PLANS = "all plans"
    """Every valid plan of the problem under the cost model."""
    PROPOSED_WAVES = "proposed waves"
    """Every plan made of the proposed waves (the ownership model's columns), with any ownership."""
    MODEL = "its model"
    """The model's own optimum only (the joint model's conservative rows): no bound of a plan."""


MODEL_NAMES = {
    "joint": "joint model",
    "lns": "joint model (window search)",
    "ownership": "ownership model",
    "schedule": "schedule model",
}
"""The words for each model in the CLI's and the summary's sentences."""


@dataclass(frozen=True, kw_only=True)
class ModelOutcome:
    """One model run: what it is, how it ended, what it proved, and what was kept when its own answer
    was not used."""

    model: str
    """Which model: a key of :data:`MODEL_NAMES`."""

    status: Status
    """How the run ended."""

    objective_s: float | None = None
    """The model's objective of its answer, in seconds (``None`` without an answer)."""

    bound_s: float | None = None
    """The proven lower bound, in seconds (``None`` without an answer)."""

    bound_scope: Scope | None = None
    """What :attr:`bound_s` bounds (``None`` without a bound)."""

    kept: str = ""
    """When the stage returned something other than this model's answer: what, and why (``""``: the
    answer, or nothing, was returned as is)."""

    detail: str = ""
    """Words a reader needs beside the status (why it was skipped; a window search's tally)."""

    def __post_init__(self) -> None:
        assert self.model in MODEL_NAMES, f"unknown model {self.model!r}"
        assert (self.bound_s is None) == (self.bound_scope is None), "a bound states its scope"

    @property
    def gap(self) -> float | None:
        """``(objective - bound) / objective``, the gap the model proved (``None`` without both)."""
        if self.objective_s is None or self.bound_s is None:
            return None
        return max(0.0, (self.objective_s - self.bound_s) / self.objective_s) if self.objective_s > 0 else 0.0

    @property
    def name(self) -> str:
        """The model's name in words."""
        return MODEL_NAMES[self.model]

    def words(self) -> str:
        """One clause in a user's words: ``ownership model: proved optimal`` and the like."""
        if self.status is Status.OPTIMAL:
            said = "proved its answer optimal"
            if self.bound_scope is Scope.MODEL:
                said += " in its own (conservative) model"
            elif self.bound_scope is Scope.PROPOSED_WAVES:
                said += " among the proposed waves"
        elif self.status is Status.FEASIBLE:
            said = "answered"
            if self.gap is not None:
                said += f", within {self.gap:.2%} of its bound"
        elif self.status is Status.NO_TIME:
            said = "not run: no time left"
        elif self.status is Status.SKIPPED:
            said = "skipped"
        elif self.status is Status.NOT_RUN:
            said = "not run"
        elif self.status is Status.FAILED:
            said = "failed"
        else:
            said = f"no answer ({self.status.value})"
        extra = [part for part in (self.detail, self.kept) if part]
        return f"{self.name} {said}" + (f" ({'; '.join(extra)})" if extra else "")

    def to_dict(self) -> dict[str, object]:
        """The record as the plan JSON's ``solver.outcomes`` entries write it."""
        return {
            "model": self.model,
            "status": self.status.value,
            "objective_s": self.objective_s,
            "bound_s": self.bound_s,
            "bound_scope": None if self.bound_scope is None else self.bound_scope.value,
            "kept": self.kept,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ModelOutcome:
        """The record back from its plan-JSON form (:meth:`to_dict`)."""
        scope = data.get("bound_scope")
        return cls(
            model=str(data["model"]),
            status=Status(str(data["status"])),
            objective_s=_number(data.get("objective_s")),
            bound_s=_number(data.get("bound_s")),
            bound_scope=None if scope is None else Scope(str(scope)),
            kept=str(data.get("kept", "")),
            detail=str(data.get("detail", "")),
        )


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


__all__ = ["MODEL_NAMES", "Ended", "ModelOutcome", "Scope", "Status"]
