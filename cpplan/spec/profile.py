"""Solver profiles: one time budget, each stage's share of it and settings, CP-SAT's parameters, the
strategies the planner runs and its wall-time estimates."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cpplan.errors import InputError
from cpplan.spec.card import read_toml
from cpplan.spec.layout_specs import parse_layout
from cpplan.spec.shipped import toml_files
from cpplan.spec.validation import input_error

STRATEGIES = ("greedy", "full_sharing", "seeded", "cpsat")

_MOVED = {
    ("cpsat", "max_items"): ("joint", "max_items"),
    ("cpsat", "schedule_max_items"): ("schedule", "max_items"),
    ("cpsat", "hint"): ("joint", "hint"),
    ("cpsat", "ownership_columns"): ("ownership", "columns"),
    ("cpsat", "ownership_window_chunks"): ("ownership", "window_chunks"),
    ("timing", "seeded_share"): ("seeded", "share"),
}
"""Keys of the earlier profile layout and where they now stand."""

_DROPPED = (("ownership", "tighten_share"), ("joint", "max_extra_waves"), ("cpsat", "max_extra_waves"))
"""Keys of earlier profiles that no setting stands for now: the ownership model's answer is no longer
re-solved to remove slack from its reported objective, and the joint model has the greedy plan's wave
count (no profile gave it more: a plan needing more waves never beat it)."""


def migrated_profile(data: Any) -> Any:
    """``data`` (the profile saved in an earlier planner state: read where such a state is read,
    :func:`cpplan.calibration.planner_state.read_state`; a profile file takes the current keys only)
    with keys of the earlier layout moved to their stage's section and keys no setting stands for now
    dropped; its deterministic time limits (``cpsat.deterministic_time_s``,
    ``cpsat.ownership_deterministic_time_s``, ``timing.min_deterministic_s``) read as shares of the
    budget; without ``ownership.reorder_share``, the ownership model's second pass off (the state planned
    without it). Anything else is left for validation to judge."""
    if not isinstance(data, dict):
        return data
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for section, key in _DROPPED:
        if isinstance(data.get(section), dict):
            data[section].pop(key, None)
    if isinstance(data.get("cpsat"), dict) and "max_items" in data["cpsat"]:
        data["cpsat"].setdefault("schedule_max_items", data["cpsat"]["max_items"])
    if isinstance(data.get("cpsat"), dict) and "deterministic_time_s" in data["cpsat"]:
        data["cpsat"].setdefault("schedule_deterministic_time_s", data["cpsat"]["deterministic_time_s"])
    for (old, key), (new, name) in _MOVED.items():
        if isinstance(data.get(old), dict) and key in data[old]:
            data.setdefault(new, {}).setdefault(name, data[old].pop(key))
    budget = data.get("time_budget_s")
    shares = {
        ("cpsat", "deterministic_time_s"): ("joint", "share"),
        ("cpsat", "schedule_deterministic_time_s"): ("schedule", "share"),
        ("cpsat", "ownership_deterministic_time_s"): ("ownership", "share"),
        ("timing", "min_deterministic_s"): ("lns", "min_window_share"),
    }
    for (old, key), (new, name) in shares.items():
        if isinstance(data.get(old), dict) and key in data[old]:
            limit = data[old].pop(key)
            if isinstance(limit, int | float) and isinstance(budget, int | float) and budget > 0:
                data.setdefault(new, {}).setdefault(name, min(1.0, limit / budget))
    if isinstance(data.setdefault("ownership", {}), dict):  # saved before the second pass: planned without it
        data["ownership"].setdefault("reorder_share", 0.0)
    return _within_one_budget(data)


def _within_one_budget(data: dict) -> dict:
    """``data`` with its schedule share lowered to what the other stages leave of the budget where an
    earlier state's shares add up to more than one (the offline profile of that time: joint 0.6,
    ownership 0.3, schedule 0.2; under the clock the schedule model takes what is left anyway)."""

    def share(section: str, key: str, default: float) -> float:
        value = data.get(section, {}).get(key, default) if isinstance(data.get(section), dict) else default
        return float(value) if isinstance(value, int | float) else default

    ownership = data.get("ownership") if isinstance(data.get("ownership"), dict) else {}
    others = share("joint", "share", JointParams().share) + share(
        "ownership", "share", OwnershipParams().share
    )
    others += share("ownership", "reorder_share", OwnershipParams().reorder_share)
    if ownership.get("hint", OwnershipParams().hint) == "complete":
        others += share("ownership", "complete_share", OwnershipParams().complete_share)
    if others < 1 and others + share("schedule", "share", ScheduleParams().share) > 1:
        data.setdefault("schedule", {})["share"] = round(1 - others, 12)
    return data


class CpSatParams(BaseModel):
    """CP-SAT's own parameters, the same for every model the planner runs (the ``[cpsat]`` table; the
    ownership model and the window search may set their own ``linearization_level``); completing the
    ownership model's hint takes its workers and seed, but presolves fully and stops only at optimality
    (:func:`cpplan.cpsat.solve.run_on_work`)."""

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

    linearization_level: Literal[0, 1, 2] = 1
    """How much of the model CP-SAT also solves as a linear relaxation while it searches: ``0`` none
    (propagation alone), ``1`` CP-SAT's default, ``2`` more (cuts). More LP gives stronger bounds on
    some models and costs work on every node; the ownership model takes its own
    (``ownership.linearization_level``)."""

    deterministic_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """A stage's deterministic time limit (CP-SAT's work counter, not the clock), set by the planner
    from the stage's share of the budget under a deterministic profile; a profile file does not set
    it (an old profile's value is read as the joint stage's share, see :func:`migrated_profile`)."""


class JointParams(BaseModel):
    """The joint model of waves and layouts, the proposer CP-SAT drives (the ``[joint]`` table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    share: float = Field(default=0.2, gt=0, le=1, allow_inf_nan=False)
    """Its share of the budget: under a deterministic profile its deterministic time limit is this
    times the budget; under the clock it searches at most this share of the budget, and never into the
    time kept for the ownership stage and verification."""

    max_items: int = Field(default=64, ge=1)
    """Above this many items the joint model is not built whole: its window search (``[lns]``)
    re-solves a few adjacent waves of the greedy plan at a time."""

    hint: bool = True
    """Hand the joint model the greedy plan as a complete hint (every variable, the objective included)."""


class LnsParams(BaseModel):
    """The joint model's window search above ``joint.max_items`` (the ``[lns]`` table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    window_waves: int = Field(default=3, ge=1)
    """The most adjacent waves one window re-solves (windows overlap by one wave, so items travel)."""

    window_items_per_max_items: int = Field(default=2, ge=1)
    """A window holds at most this many times ``joint.max_items`` items."""

    max_passes: int = Field(default=3, ge=1)
    """Passes over the plan at most (a pass without an improvement ends the search)."""

    min_window_share: float = Field(default=0.005, gt=0, le=1, allow_inf_nan=False)
    """Under a deterministic profile, the least share of the budget one window's deterministic time
    limit gets (a pass shares the joint stage's limit among its windows)."""

    max_window_share: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    """Under a deterministic profile, the most share of the budget one window's deterministic time
    limit gets (``None``: no cap beyond the pass's limit), on steps of at least ``capped_from_items``."""

    capped_from_items: int = Field(default=1, ge=1)
    """The least items a step holds for ``max_window_share`` to cap its windows (smaller steps' windows
    share the pass's limit uncapped: they are few, and the cap would cost them plan quality)."""

    linearization_level: Literal[0, 1, 2] | None = None
    """CP-SAT's linear relaxation on a window (``None``: ``cpsat.linearization_level``). A window starts
    from its complete hint under a small deterministic limit, where the relaxation's work leaves less
    search."""

    @model_validator(mode="after")
    def _window_shares(self) -> LnsParams:
        if self.max_window_share is not None and self.max_window_share < self.min_window_share:
            raise ValueError(
                f"lns.max_window_share ({self.max_window_share:g}) is below lns.min_window_share "
                f"({self.min_window_share:g})"
            )
        return self


class OwnershipParams(BaseModel):
    """The ownership model, the one stage that decides which proposed waves run and which rank owns
    every chunk (the ``[ownership]`` table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    share: float = Field(default=0.1, gt=0, le=1, allow_inf_nan=False)
    """Its share of the budget: under a deterministic profile its deterministic time limit is this
    times the budget; under the clock this much of the budget is kept for it while the proposers run,
    and it searches until the time kept for verification."""

    columns: int = Field(default=16, ge=0)
    """Free columns: the costliest proposed waves whose CP split it re-decides (the others run as
    proposed)."""

    window_chunks: int = Field(default=32, ge=0)
    """How far (in 128-token chunks) each rank boundary of a free column may move from where a
    proposal put it."""

    hint: Literal["none", "choices", "complete"] = "choices"
    """What it is handed: nothing, the cheapest proposal's choices (which columns run as they are), or
    a complete hint (those choices, every other variable solved from them by propagation: what CP-SAT
    needs to answer at all without presolve inside a runtime budget)."""

    complete_share: float = Field(default=0.1, gt=0, le=1, allow_inf_nan=False)
    """The deterministic time limit of completing a ``complete`` hint, as a share of the budget."""

    linearization_level: Literal[0, 1, 2] = 0
    """CP-SAT's linear relaxation on this model (``cpsat.linearization_level`` for the others): none by
    default. On the ownership models measured (the README example and the quick bench suite at CP 1 to
    8: CHANGELOG, 2026-12-04) the relaxation took most of the work without a stronger bound: without it
    more answers were proved optimal within the same limit, and none was costlier."""

    reorder_share: float = Field(default=0.02, ge=0, le=1, allow_inf_nan=False)
    """Its second pass's share of the budget (0: no second pass): each chosen wave whose ownership is
    not contiguous in packed order is re-split in that ownership's own order, its chunks moved between
    ranks around it, the ownership model over the chosen waves alone; a wave keeps the cheaper version.
    Under the clock, the first pass stops this much earlier."""

    relaxation_share: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    """Under a deterministic budget, the part of this stage's limit kept for a second run with CP-SAT's
    linear relaxation (level 1), from the first run's answer, where that answer is not proved optimal;
    the first run gets the rest (0: one run, the whole limit). Where the first run proves its answer
    (most ownership models, within a fraction of the limit) the second never runs; at a memory edge the
    relaxation finds what a search without it misses (long_tail CP8 40 GiB: CHANGELOG, 2026-12-04)."""


class ScheduleParams(BaseModel):
    """The schedule model, which decides for CP-SAT where a plan's waves share a pool of CP groups
    (``dp > 1`` or dynamic CP): each wave's group size, place and start (the ``[schedule]`` table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    share: float = Field(default=0.2, gt=0, le=1, allow_inf_nan=False)
    """Its share of the budget: under a deterministic profile its deterministic time limit is this
    times the budget; under the clock it searches until the time kept for verification."""

    max_items: int = Field(default=64, ge=1)
    """Above this many items the schedule model is not built (its outcome says so)."""

    partition_replicas: bool = False
    """Under ``dp > 1`` (fixed CP groups, at least ``dp`` items), a call without a replica plans the
    step partitioned by replica (:meth:`cpplan.Planner.plan`: every replica's share planned as a
    ``dp = 1`` problem, assembled) instead of one joint model of the whole pool."""


class SeededParams(BaseModel):
    """The seeded proposer: greedy's waves re-priced from other seeds (the ``[seeded]`` table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    share: float = Field(default=0.5, gt=0, le=1, allow_inf_nan=False)
    """Under the clock, the share of the proposers' time left that it may start seeds in (a
    deterministic profile runs every seed)."""

    max_items: int | None = Field(default=None, ge=1)
    """Above this many items the seeded proposer is not run (``None``: at any size). On a large step its
    repairs (greedy re-planning each seed's waves that do not fit) take seconds, and on the 400
    ShareGPT conversations of ``benchmarks/bench_default_profile.py`` its plan was the costliest
    proposal and the plan chosen was the same without it."""


class MovesParams(BaseModel):
    """Items moved between the cheapest proposal's waves, then each of its waves' whole requests packed
    onto ranks again, before the ownership model decides (the ``[moves]`` table,
    :mod:`cpplan.planners.item_moves`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_pricings: int = Field(default=120, ge=0)
    """The most waves priced while moving and swapping items between waves (two per neighbour tried;
    0: no moves, and no repacking either), and again, on a pool, while moving them between the
    scheduled ``cpsat`` plan's waves to end the step sooner
    (:mod:`~cpplan.planners.makespan_moves`). Under the clock the proposers' deadline (on a pool, the
    time kept for verifying) stops it sooner."""

    max_waves: int = Field(default=8, ge=2)
    """Items move, and waves are repacked and chained, only within a proposal (on a pool, a scheduled
    ``cpsat`` plan) of at most this many waves: on 400 ShareGPT conversations at CP2 (63 waves) the
    moves made the plan 0.02% cheaper and the ownership model's search 1.3 s longer. On a pool, a
    scheduled ``cpsat`` plan of more waves still has waves merged (within ``max_pricings``)."""

    chain_rotations: int = Field(default=8, ge=0)
    """Rotations of the split at which each wave's ranks are chained round its packed order, in each of
    two orders of its units (:func:`~cpplan.pricing.chained.chained_wave`: a pricing each); 0: not
    chained. Unlike the moves, this runs where ``max_pricings`` is 0."""


class GreedyParams(BaseModel):
    """Parameters of the greedy exact planner: the layouts it tries for each candidate wave."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    layouts: tuple[str, ...] = ("full", "none", "min_span:512")
    """Layout specs priced for every candidate wave (``full``, ``none``, ``depth:K``, ``min_span:T``);
    the cheapest that fits is kept. The seeded and CP-SAT strategies use the same list."""

    reorder: bool = True
    """Price every candidate wave also with its items reordered so that CP ranks hold whole requests and
    nothing crosses ranks (:func:`~cpplan.pricing.wave.price_wave`): cheaper plans where many independent
    requests share a wave (a long tail), at an exchange search per pricing (up to half a runtime call
    on GRPO steps at CP8, where it made no plan cheaper; CHANGELOG.md, 2026-12-05)."""

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
    under the runtime profile; the CP-SAT build estimates with ``benchmarks/bench_scale.py --cluster
    --build-times``, at the load of two busy processes); a deterministic profile never reads the
    clock, so there none counts."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    verify_s: float = Field(default=0.004, ge=0, allow_inf_nan=False)
    """Seconds kept back for verifying (and serializing) a plan, fixed part."""

    verify_s_per_token: float = Field(default=6e-9, ge=0, allow_inf_nan=False)
    """Seconds kept back for verifying a plan, per logical token (serializing and verifying a
    1.5M-token, 256-item plan takes about 5 ms on the 2-core machine, up to twice that when busy)."""

    realize_s: float = Field(default=0.008, ge=0, allow_inf_nan=False)
    """Seconds kept back from the CP-SAT search for realizing its answer, fixed part (verification is
    kept back on top)."""

    realize_s_per_token: float = Field(default=1e-8, ge=0, allow_inf_nan=False)
    """Seconds kept back for realizing a CP-SAT answer, per logical token (``bench_runtime.py``)."""

    min_search_s: float = Field(default=0.005, ge=0, allow_inf_nan=False)
    """Below this much search time left, CP-SAT (and a window of its large-neighbourhood search) is not
    started."""

    build_s: float = Field(default=0.012, ge=0, allow_inf_nan=False)
    """Seconds to build the joint model (its decision space, item floors, model and hint), fixed part:
    a model is built only when :meth:`joint_needs_s` is left."""

    build_s_per_item: float = Field(default=8e-4, ge=0, allow_inf_nan=False)
    """Seconds to build the joint model (and, for a window, its sub-problem), per item: a model is built
    only when this much time is left besides :attr:`build_s` and :attr:`min_search_s`."""

    ownership_build_s: float = Field(default=0.004, ge=0, allow_inf_nan=False)
    """Seconds to build the ownership model, fixed part: it is built only when
    :meth:`ownership_needs_s` is left."""

    ownership_build_s_per_column: float = Field(default=0.015, ge=0, allow_inf_nan=False)
    """Seconds to build the ownership model per free column, besides its chunks' (its hand-off terms
    and the crossings inside the boundaries' windows)."""

    ownership_build_s_per_chunk: float = Field(default=2e-5, ge=0, allow_inf_nan=False)
    """Seconds to build the ownership model per chunk of a free column (one whose split the model
    decides: its split, memory rows, barriers and hand-off crossings); with less time left the cheapest
    free columns are taken as proposed, and without time for the model with none free it is skipped."""

    seed_s_per_item: float = Field(default=4e-4, ge=0, allow_inf_nan=False)
    """Seconds one seed of the seeded strategy is expected to take per item before any has run
    (proposing and repairing a plan prices about as many waves as greedy does)."""

    seed_s_per_token: float = Field(default=1.2e-7, ge=0, allow_inf_nan=False)
    """Seconds the first seed of the seeded strategy is expected to take per logical token, besides
    :attr:`seed_s_per_item` (it prices every wave of its proposal under every layout, none cached yet;
    :meth:`seed_needs_s`)."""

    finish_pricings: int = Field(default=8, ge=0)
    """Pricings (at the last one's time) greedy's cut of a wave, its layouts and the plan's ending may
    take: with less time left, the fitting wave found is kept as it is."""

    bound_min_left_s: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    """Search seconds left, at least, for the deciding stage to compute the bound over every plan
    (:mod:`cpplan.bound`) before the ownership search: the bound takes tens of milliseconds on a few
    hundred requests, up to about 0.1 s where it also prices its matching plan, whose waves then join
    the ownership model as columns; a runtime budget keeps that time for the search, and its plan says
    "no time for it" where the bound would stand."""

    regroup_time_factor: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    """Greedy's regrouped pass starts only with this many times the first pass's time left (it also
    builds the regrouped problem, and a pass cut short packs the rest at once)."""

    def slowed(self, factor: float) -> TimingParams:
        """These estimates for a call whose work takes ``factor`` (at least 1) times as long (a busy
        machine): every estimate of what work needs before it starts (a field in seconds, whole or per
        unit) multiplied by it; the reserves kept back for realizing and verifying (:data:`RESERVES`,
        with room to spare, which a kept Planner's aim corrects), counts and factors as they are."""
        assert factor >= 1, factor
        if factor == 1:
            return self
        names = (
            n for n in type(self).model_fields if (n.endswith("_s") or "_s_per_" in n) and n not in RESERVES
        )
        return self.model_copy(update={name: getattr(self, name) * factor for name in names})

    def verify_reserve_s(self, logical_tokens: int) -> float:
        """Seconds to keep back for verifying (and serializing) a plan of ``logical_tokens``."""
        return self.verify_s + self.verify_s_per_token * logical_tokens

    def realize_reserve_s(self, logical_tokens: int) -> float:
        """Seconds to keep back for realizing a CP-SAT answer over ``logical_tokens``."""
        return self.realize_s + self.realize_s_per_token * logical_tokens

    def seed_needs_s(self, num_items: int, logical_tokens: int) -> float:
        """Seconds the seeded strategy's first seed is expected to take on a step of ``num_items`` items
        and ``logical_tokens`` tokens (later seeds are expected to take what the last one took)."""
        return self.seed_s_per_item * num_items + self.seed_s_per_token * logical_tokens

    def joint_needs_s(self, num_items: int) -> float:
        """Seconds the joint model (or a window of its search) over ``num_items`` items needs to be
        built and searched at all: its build estimate and :attr:`min_search_s`."""
        return self.build_s + self.build_s_per_item * num_items + self.min_search_s

    def ownership_needs_s(self, num_free_columns: int, num_free_chunks: int) -> float:
        """Seconds the ownership model needs to be built and searched at all, with ``num_free_columns``
        free columns holding ``num_free_chunks`` chunks."""
        free = self.ownership_build_s_per_column * num_free_columns
        per_chunk = self.ownership_build_s_per_chunk * num_free_chunks
        return self.ownership_build_s + free + per_chunk + self.min_search_s


RESERVES = ("verify_s", "verify_s_per_token", "realize_s", "realize_s_per_token")
"""The ``[timing]`` fields kept back after a search (realizing and verifying its plan), which
:meth:`TimingParams.slowed` leaves as they are."""


class SolverProfile(BaseModel):
    """A validated solver profile (one TOML file per profile): one budget, and one section per stage
    of :func:`cpplan.planners.portfolio.solve` saying what the stage does and its share of the budget."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: str
    """The profile's name (a shipped profile's is its file's stem)."""

    description: str = ""
    """One line saying what the profile is for."""

    time_budget_s: float = Field(gt=0, allow_inf_nan=False)
    """The one budget of a planning call (``--time-budget`` overrides it): wall-clock seconds from the
    call, or, under a deterministic profile, units of CP-SAT's deterministic time (its work counter;
    the clock is never read): each CP-SAT run's deterministic limit is its stage's share of it
    (:meth:`stage_shares`, which add up to at most one; each pass of the joint model's window search
    shares ``joint.share`` out among its windows, each at least ``lns.min_window_share`` and at most
    ``lns.max_window_share``). Those limits apply again at every group size under dynamic CP and to
    every replica's share where a step is partitioned."""

    deterministic: bool = False
    """Same inputs, same plan on any machine: no stage decides by the clock; CP-SAT stops on its
    deterministic time limits only (each stage's share of the budget)."""

    strategies: tuple[Literal["greedy", "full_sharing", "seeded", "cpsat"], ...] = STRATEGIES
    """Strategies the planner runs: the proposers (``greedy``, ``full_sharing``, ``seeded``) in this
    order, and ``cpsat`` (the joint model's proposal, then the ownership model deciding over every
    proposal) where it stands among them; each is a candidate of the answer."""

    greedy: GreedyParams = GreedyParams()
    """Parameters of the greedy planner (its layouts are every strategy's candidate layouts)."""

    seeded: SeededParams = SeededParams()
    """Parameters of the seeded proposer."""

    moves: MovesParams = MovesParams()
    """Items moved between the cheapest proposal's waves before the ownership model decides."""

    joint: JointParams = JointParams()
    """Parameters of the joint model (the CP-SAT proposer)."""

    lns: LnsParams = LnsParams()
    """Parameters of the joint model's window search (above ``joint.max_items``)."""

    ownership: OwnershipParams = OwnershipParams()
    """Parameters of the ownership model (the deciding stage)."""

    schedule: ScheduleParams = ScheduleParams()
    """Parameters of the schedule model (the deciding stage on a pool of CP groups)."""

    cpsat: CpSatParams = CpSatParams()
    """CP-SAT's parameters, for every model."""

    timing: TimingParams = TimingParams()
    """The wall-time estimates the planner budgets with under the clock (the ``[timing]`` table)."""

    path: str | None = None
    """The TOML file the profile was read from (``None`` when built in code); left out of the pack
    run's solver digest."""

    @model_validator(mode="after")
    def _one_budget(self) -> SolverProfile:
        """The stages' shares of the budget add up to at most one (:meth:`stage_shares`)."""
        shares = self.stage_shares()
        total = sum(shares.values())
        if total > 1 + 1e-9:
            terms = " + ".join(f"{name} {share:g}" for name, share in shares.items())
            raise ValueError(f"the stages' shares of the budget add up to {total:g} ({terms}), more than one")
        return self

    def stage_shares(self) -> dict[str, float]:
        """The shares of the one budget the stages of a call at one CP size take in turn: the joint
        model's, the ownership model's (and completing its hint, with ``ownership.hint = "complete"``)
        and the schedule model's. The window search shares ``joint.share`` out among its windows, and
        ``seeded.share`` is a share of the proposers' time, so neither adds to the sum."""
        shares = {"joint.share": self.joint.share, "ownership.share": self.ownership.share}
        shares["ownership.reorder_share"] = self.ownership.reorder_share
        if self.ownership.hint == "complete":
            shares["ownership.complete_share"] = self.ownership.complete_share
        shares["schedule.share"] = self.schedule.share
        return shares

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
