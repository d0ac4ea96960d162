"""Solver profiles: declarative time budgets, CP-SAT parameters and the portfolio's fallback order."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cpplan.errors import InputError
from cpplan.spec.card import read_toml
from cpplan.spec.layout_specs import parse_layout
from cpplan.spec.shipped import toml_files
from cpplan.spec.validation import input_error

STRATEGIES = ("greedy", "full_sharing", "seeded", "cpsat")


class CpSatParams(BaseModel):
    """CP-SAT parameters a profile sets."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    num_workers: int = Field(default=1, ge=0, le=64)
    """CP-SAT search workers (``0``: one per CPU core)."""

    random_seed: int = Field(default=0, ge=0)
    """CP-SAT's random seed: the same seed, model and limits give the same search."""

    presolve: Literal["off", "light", "full"] = "light"
    """Presolve effort: ``off`` (none; on a small machine presolve alone can use a runtime budget),
    ``light`` (one presolve iteration, no probing) or ``full`` (CP-SAT's default)."""

    relative_gap_limit: float = Field(default=0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    """Stop once the proven gap, (objective - bound) / objective, is at most this (``0``: search until
    optimal or out of time)."""

    deterministic_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """A limit on CP-SAT's deterministic time (its work counter, not the clock), applied only under a
    deterministic profile; ``None``: none."""

    hint: bool = True
    """Hand the solver the greedy plan as a complete hint (every variable, the objective included)."""

    max_items: int = Field(default=64, ge=1)
    """Workloads with more items than this skip the CP-SAT strategy (its status says so)."""

    max_extra_waves: int = Field(default=0, ge=0)
    """Waves the model may use beyond the greedy plan's wave count."""

    ownership_columns: int = Field(default=16, ge=0)
    """The ownership model's free columns: the costliest proposed waves whose CP split it re-decides
    (the others run as proposed)."""

    ownership_window_chunks: int = Field(default=32, ge=0)
    """How far (in 128-token chunks) each rank boundary of a free column may move from where a
    proposal put it."""

    ownership_deterministic_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """The ownership model's deterministic time limit under a deterministic profile (``None``: the
    joint model's)."""


class GreedyParams(BaseModel):
    """Parameters of the greedy exact planner: the layouts it tries for each candidate wave."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    layouts: tuple[str, ...] = ("full", "none", "min_span:512")
    """Layout specs priced for every candidate wave (``full``, ``none``, ``depth:K``, ``min_span:T``);
    the cheapest that fits is kept. The seeded and CP-SAT strategies use the same list."""

    @field_validator("layouts")
    @classmethod
    def _valid_layouts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for spec in value:
            try:
                parse_layout(spec)
            except InputError:
                raise ValueError(f"unknown layout {spec!r}; use full, none, depth:K or min_span:T") from None
        if not value:
            raise ValueError("must list at least one layout")
        return value


class TimingParams(BaseModel):
    """The wall-time estimates the portfolio budgets its deadline with: what it keeps back for work
    after a search and what it expects work to take before starting it. The defaults were measured on
    the 2-core development machine (``benchmarks/bench_runtime.py`` and ``benchmarks/bench_planners.py``
    under the runtime profile); a deterministic profile never reads the clock, so there only
    :attr:`min_deterministic_s` counts."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    verify_s: float = Field(default=0.002, ge=0, allow_inf_nan=False)
    """Seconds kept back for verifying (and serializing) a plan, fixed part."""

    verify_s_per_token: float = Field(default=6e-9, ge=0, allow_inf_nan=False)
    """Seconds kept back for verifying a plan, per logical token (serializing and verifying a
    1.5M-token, 256-item plan takes about 5 ms on the 2-core machine, up to twice that when busy)."""

    realize_s: float = Field(default=0.003, ge=0, allow_inf_nan=False)
    """Seconds kept back from the CP-SAT search for realizing its answer, fixed part (verification is
    kept back on top)."""

    realize_s_per_token: float = Field(default=1e-8, ge=0, allow_inf_nan=False)
    """Seconds kept back for realizing a CP-SAT answer, per logical token (``bench_runtime.py``)."""

    min_search_s: float = Field(default=0.005, ge=0, allow_inf_nan=False)
    """Below this much search time left, CP-SAT (and a window of its large-neighbourhood search) is not
    started."""

    build_s_per_item: float = Field(default=2.5e-4, ge=0, allow_inf_nan=False)
    """Seconds to build the joint model (and, for a window, its sub-problem), per item: a model is built
    only when this much time is left besides :attr:`min_search_s`."""

    seed_s_per_item: float = Field(default=4e-4, ge=0, allow_inf_nan=False)
    """Seconds one seed of the seeded strategy is expected to take per item before any has run
    (proposing and repairing a plan prices about as many waves as greedy does)."""

    seeded_share: float = Field(default=0.5, gt=0, le=1, allow_inf_nan=False)
    """The share of the time left that the seeded strategy may start seeds in."""

    finish_pricings: int = Field(default=8, ge=0)
    """Pricings (at the last one's time) greedy's cut of a wave, its layouts and the plan's ending may
    take: with less time left, the fitting wave found is kept as it is."""

    regroup_time_factor: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    """Greedy's regrouped pass starts only with this many times the first pass's time left (it also
    builds the regrouped problem, and a pass cut short packs the rest at once)."""

    min_deterministic_s: float = Field(default=0.05, gt=0, allow_inf_nan=False)
    """The least deterministic time limit (CP-SAT's work counter, not the clock) one window of the
    large-neighbourhood search gets."""

    def verify_reserve_s(self, logical_tokens: int) -> float:
        """Seconds to keep back for verifying (and serializing) a plan of ``logical_tokens``."""
        return self.verify_s + self.verify_s_per_token * logical_tokens

    def realize_reserve_s(self, logical_tokens: int) -> float:
        """Seconds to keep back for realizing a CP-SAT answer over ``logical_tokens``."""
        return self.realize_s + self.realize_s_per_token * logical_tokens


class SolverProfile(BaseModel):
    """A validated solver profile (one TOML file per profile)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: str
    """The profile's name (a shipped profile's is its file's stem)."""

    description: str = ""
    """One line saying what the profile is for."""

    time_budget_s: float = Field(gt=0, allow_inf_nan=False)
    """Seconds the whole portfolio may take, counted from the planning call (``--time-budget``
    overrides it); a deterministic profile never reads the clock, so there it bounds nothing."""

    deterministic: bool = False
    """Same inputs, same plan on any machine: the portfolio's deadline never expires (no strategy
    decides by the clock) and CP-SAT stops on its deterministic time limit only."""

    strategies: tuple[Literal["greedy", "full_sharing", "seeded", "cpsat"], ...] = STRATEGIES
    """Strategies the portfolio runs, in this order (names of :data:`cpplan.planners.PLANNERS`)."""

    greedy: GreedyParams = GreedyParams()
    """Parameters of the greedy planner (its layouts are every strategy's candidate layouts)."""

    cpsat: CpSatParams = CpSatParams()
    """Parameters of the CP-SAT strategy."""

    timing: TimingParams = TimingParams()
    """The wall-time estimates the portfolio budgets its deadline with (the ``[timing]`` table)."""

    path: str | None = None
    """The TOML file the profile was read from (``None`` when built in code); left out of the pack
    run's solver digest."""

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
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InputError(
                f"must be a positive number of seconds, got {seconds!r} ({type(seconds).__name__})",
                field="time_budget",
            )
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
