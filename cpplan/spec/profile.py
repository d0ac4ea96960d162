"""Solver profiles: declarative time budgets, CP-SAT parameters and the portfolio's fallback order."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cpplan.errors import InputError
from cpplan.spec.card import read_toml
from cpplan.spec.shipped import toml_files
from cpplan.spec.validation import input_error

STRATEGIES = ("greedy", "full_sharing", "seeded", "cpsat")


class CpSatParams(BaseModel):
    """CP-SAT parameters a profile sets."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_workers: int = Field(default=1, ge=0, le=64)
    random_seed: int = Field(default=0, ge=0)
    presolve: Literal["off", "light", "full"] = "light"
    relative_gap_limit: float = Field(default=0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    deterministic_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    hint: bool = True
    max_items: int = Field(default=64, ge=1)
    max_extra_waves: int = Field(default=0, ge=0)


class GreedyParams(BaseModel):
    """Parameters of the greedy exact planner: the layouts it tries for each candidate wave."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layouts: tuple[str, ...] = ("full", "none", "min_span:512")

    @field_validator("layouts")
    @classmethod
    def _valid_layouts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from cpplan.pricing.layout import parse_layout

        for spec in value:
            try:
                parse_layout(spec)
            except InputError:
                raise ValueError(f"unknown layout {spec!r}; use full, none, depth:K or min_span:T") from None
        if not value:
            raise ValueError("must list at least one layout")
        return value


class SolverProfile(BaseModel):
    """A validated solver profile (one TOML file per profile)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    time_budget_s: float = Field(gt=0, allow_inf_nan=False)
    deterministic: bool = False
    strategies: tuple[Literal["greedy", "full_sharing", "seeded", "cpsat"], ...] = STRATEGIES
    greedy: GreedyParams = GreedyParams()
    cpsat: CpSatParams = CpSatParams()
    path: str | None = None

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must list at least one strategy")
        if len(set(value)) != len(value):
            raise ValueError("lists a strategy twice")
        return value

    def with_time_budget(self, seconds: float | None) -> SolverProfile:
        """A copy with another time budget (``None`` keeps it); ``seconds`` must be positive."""
        if seconds is None:
            return self
        if not seconds > 0 or seconds != seconds or seconds == float("inf"):
            raise InputError(f"must be a positive number of seconds, got {seconds}", field="time_budget")
        return self.model_copy(update={"time_budget_s": float(seconds)})


def _packaged_profiles() -> dict[str, Path]:
    return toml_files("cpplan.profiles")


def available_solvers() -> list[str]:
    """Names of the solver profiles shipped with cpplan."""
    return sorted(_packaged_profiles())


def load_solver(name_or_path: str | Path = "runtime") -> SolverProfile:
    """Load a shipped profile by name, or a TOML profile by path."""
    path = Path(name_or_path)
    if path.suffix != ".toml" and not path.exists():
        shipped = _packaged_profiles()
        if str(name_or_path).lower() not in shipped:
            raise InputError(
                f"unknown solver profile {str(name_or_path)!r}; shipped: "
                f"{', '.join(available_solvers())} (or give a path to a .toml profile)",
                field="solver",
            )
        path = shipped[str(name_or_path).lower()]
    data, text = read_toml(path, what="solver profile")
    data.setdefault("path", str(path))
    try:
        return SolverProfile.model_validate(data)
    except ValidationError as exc:
        raise input_error(exc, file=path, toml_text=text) from None
