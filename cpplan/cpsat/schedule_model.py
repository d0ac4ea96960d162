"""The dynamic-CP schedule model: each block of items chooses its group size, each wave its place and start on
the pool, and the objective is the makespan (docs/dynamic_cp.md).

The greedy dynamic plan's placement units are *blocks*; each has *alternatives* (its items as waves of another
group size, its own waves first), each a list of *jobs* (a wave, or a split item's waves back to back). ``y[k,
a]``: block k runs alternative a (exactly one); per job a start ``s_j`` and per aligned pool block ``b`` of
its size ``x[j, b]`` (``Σ_b x[j, b] = y[k, a]``) with an optional interval of the job's exact seconds rounded
up to microseconds; per GPU no two intervals overlap; ``makespan ≥ s_j + d_j``; under equal waves, per GPU
``makespan ≥ e_g + padding_us · (most - n_g)``. :func:`realize` replays the chosen jobs by start, so the
realized makespan never exceeds the model's; the greedy plan is the complete hint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cpplan.cpsat.solve import STATUSES, run_solver, run_stats
from cpplan.plans.outcome import ModelOutcome, Scope, Status
from cpplan.plans.plan import Plan, SolverStats
from cpplan.plans.pool_schedule import block, timed
from cpplan.pricing.wave import WavePlan
from cpplan.spec.profile import CpSatParams

MICROSECONDS = 1_000_000


@dataclass(frozen=True, kw_only=True)
class Job:
    """Waves of one group size run back to back on one block of the pool."""

    waves: tuple[WavePlan, ...]

    @property
    def size(self) -> int:
        """The group size of its waves."""
        return self.waves[0].cp

    @property
    def duration_us(self) -> int:
        """Its seconds, rounded up to microseconds."""
        return math.ceil(math.fsum(w.cost_s for w in self.waves) * MICROSECONDS)


@dataclass(frozen=True, kw_only=True)
class HintJob:
    """Where the hint places a job of a block's first alternative: block index and start (µs)."""

    block: int
    start_us: int


@dataclass(frozen=True, kw_only=True, eq=False)
class ScheduleModel:
    """A compiled schedule model: the CP-SAT model, its variables and the alternatives they choose."""

    model: cp_model.CpModel
    pool: int
    alternatives: tuple[tuple[tuple[Job, ...], ...], ...]
    choose: tuple[tuple[cp_model.IntVar, ...], ...]
    place: dict[tuple[int, int, int], dict[int, cp_model.IntVar]]
    start: dict[tuple[int, int, int], cp_model.IntVar]
    makespan: cp_model.IntVar
    padding_s: float | None = None
    """Under equal waves, the seconds of one padding wave (``None``: waves are not equalized)."""
    ends: tuple[cp_model.IntVar, ...] = ()
    """Under equal waves, each GPU's end before its padding."""
    most: cp_model.IntVar | None = None
    """Under equal waves, the busiest GPU's wave count."""


def padding_us(padding_s: float) -> int:
    """One padding wave's seconds, rounded up to microseconds."""
    return math.ceil(padding_s * MICROSECONDS)


def compile_schedule(
    alternatives: Sequence[Sequence[Sequence[Job]]], pool: int, padding_s: float | None = None
) -> ScheduleModel:
    """The model of the module docstring over ``alternatives[k][a]`` (the jobs of block ``k``'s
    alternative ``a``) on a pool of ``pool`` GPUs; with ``padding_s``, under equal waves."""
    model = cp_model.CpModel()
    horizon = sum(max(sum(j.duration_us for j in alt) for alt in alts) for alts in alternatives)
    most_waves = sum(max(sum(len(j.waves) for j in alt) for alt in alts) for alts in alternatives)
    pad_us = 0 if padding_s is None else padding_us(padding_s)
    makespan = model.new_int_var(0, horizon + pad_us * most_waves, "makespan")
    by_gpu: list[list[cp_model.IntervalVar]] = [[] for _ in range(pool)]
    choose, place, start = [], {}, {}
    for k, alts in enumerate(alternatives):
        chosen = [model.new_bool_var(f"y{k}_{a}") for a in range(len(alts))]
        model.add_exactly_one(chosen)
        choose.append(tuple(chosen))
        for a, jobs in enumerate(alts):
            for j, job in enumerate(jobs):
                key = (k, a, j)
                start[key] = model.new_int_var(0, horizon, f"s{k}_{a}_{j}")
                place[key] = _placements(model, job, key, start[key], pool, by_gpu)
                model.add(sum(place[key].values()) == chosen[a])
                model.add(makespan >= start[key] + job.duration_us).only_enforce_if(chosen[a])
    for intervals in by_gpu:
        model.add_no_overlap(intervals)
    ends, most = (), None
    if padding_s is not None:
        ends, most = _equal_waves(model, alternatives, place, start, pool, (horizon, most_waves, pad_us))
        for end, count in zip(ends, _counts(alternatives, place, pool), strict=True):
            model.add(makespan >= end + pad_us * (most - count))
    model.minimize(makespan)
    return ScheduleModel(
        model=model,
        pool=pool,
        alternatives=tuple(tuple(tuple(jobs) for jobs in alts) for alts in alternatives),
        choose=tuple(choose),
        place=place,
        start=start,
        makespan=makespan,
        padding_s=padding_s,
        ends=ends,
        most=most,
    )


def _counts(alternatives, place, pool: int) -> list:
    """Each GPU's wave count: ``sum x[j, b] * |j|`` over the placements whose block holds it."""
    counts: list = [0] * pool
    for (k, a, j), spots in place.items():
        job = alternatives[k][a][j]
        for b, x in spots.items():
            for gpu in block(job.size, b):
                counts[gpu] = counts[gpu] + len(job.waves) * x
    return counts


def _equal_waves(model, alternatives, place, start, pool: int, bounds: tuple[int, int, int]):
    """Each GPU's end ``e_g`` (at least every job placed on it ends) and the busiest count ``most``."""
    horizon, most_waves, _ = bounds
    most = model.new_int_var(0, most_waves, "most")
    for count in _counts(alternatives, place, pool):
        model.add(most >= count)
    ends = tuple(model.new_int_var(0, horizon, f"e{g}") for g in range(pool))
    for key, spots in place.items():
        job = alternatives[key[0]][key[1]][key[2]]
        for b, x in spots.items():
            for gpu in block(job.size, b):
                model.add(ends[gpu] >= start[key] + job.duration_us).only_enforce_if(x)
    return ends, most


def _placements(model, job: Job, key, start, pool: int, by_gpu) -> dict[int, cp_model.IntVar]:
    """``x[j, b]`` for every aligned block ``b`` of the job's size, each with its optional interval
    added to the no-overlap lists of the block's GPUs."""
    found = {}
    for b in range(pool // job.size):
        present = model.new_bool_var(f"x{key}_{b}")
        interval = model.new_optional_fixed_size_interval_var(start, job.duration_us, present, f"i{key}_{b}")
        for gpu in block(job.size, b):
            by_gpu[gpu].append(interval)
        found[b] = present
    return found


def add_hint(compiled: ScheduleModel, placements: Sequence[Sequence[HintJob]]) -> None:
    """Hint every block's first alternative with its jobs at ``placements[k][j]`` (every variable,
    the makespan included)."""
    model = compiled.model
    ends, counts = [0] * compiled.pool, [0] * compiled.pool
    for k, chosen in enumerate(compiled.choose):
        for a, var in enumerate(chosen):
            model.add_hint(var, a == 0)
            for j in range(len(compiled.alternatives[k][a])):
                spot = placements[k][j] if a == 0 else None
                model.add_hint(compiled.start[(k, a, j)], spot.start_us if spot else 0)
                for b, x in compiled.place[(k, a, j)].items():
                    model.add_hint(x, spot is not None and spot.block == b)
                if spot is not None:
                    job = compiled.alternatives[k][a][j]
                    for gpu in block(job.size, spot.block):
                        ends[gpu] = max(ends[gpu], spot.start_us + job.duration_us)
                        counts[gpu] += len(job.waves)
    end = max(ends, default=0)
    if compiled.most is not None:
        pad_us, most = padding_us(compiled.padding_s or 0.0), max(counts, default=0)
        end = max((e + pad_us * (most - n) for e, n in zip(ends, counts, strict=True)), default=0)
        model.add_hint(compiled.most, most)
        for var, e in zip(compiled.ends, ends, strict=True):
            model.add_hint(var, e)
    model.add_hint(compiled.makespan, end)


def hint_placements(alternatives: Sequence[Sequence[Sequence[Job]]], plan: Plan) -> list[list[HintJob]]:
    """The hint of a plan whose units are the blocks' first alternatives, in plan order: each job on
    the plan's block, started by an integer replay of the rounded durations in plan order."""
    assert plan.schedule is not None
    free = [0] * plan.schedule.pool
    w, found = 0, []
    for alts in alternatives:
        spots = []
        for job in alts[0]:
            gpus = plan.schedule.gpus[w]
            at = max(free[g] for g in gpus)
            for g in gpus:
                free[g] = at + job.duration_us
            spots.append(HintJob(block=gpus[0] // job.size, start_us=at))
            w += len(job.waves)
        found.append(spots)
    return found


def realize(compiled: ScheduleModel, solver: cp_model.CpSolver) -> Plan:
    """The chosen jobs in order of their starts (ties by block), replayed on the pool, as a ``cpsat`` plan."""
    chosen = []
    for k, alts in enumerate(compiled.alternatives):
        a = next(a for a, var in enumerate(compiled.choose[k]) if solver.boolean_value(var))
        for j, job in enumerate(alts[a]):
            b = next(b for b, x in compiled.place[(k, a, j)].items() if solver.boolean_value(x))
            chosen.append((solver.value(compiled.start[(k, a, j)]), b * job.size, job, b))
    chosen.sort(key=lambda entry: entry[:2])
    waves = [w for _, _, job, _ in chosen for w in job.waves]
    gpus = [block(job.size, b) for _, _, job, b in chosen for _ in job.waves]
    schedule = timed([w.cost_s for w in waves], gpus, compiled.pool, compiled.padding_s)
    return Plan(strategy="cpsat", waves=tuple(waves), schedule=schedule)


def solve_schedule(
    compiled: ScheduleModel,
    params: CpSatParams,
    *,
    time_limit_s: float | None,
    deterministic: bool,
) -> tuple[Plan | None, SolverStats]:
    """Run CP-SAT on ``compiled`` with a profile's ``params``: the realized plan (``None`` without an
    answer; strategy ``cpsat``), and the run's statistics (objective and bound in seconds, from the
    model's microseconds; stages ``search`` and ``realize``)."""
    solver, status, search_s = run_solver(
        compiled.model, params, time_limit_s=time_limit_s, deterministic=deterministic
    )
    name = STATUSES.get(status, Status.UNKNOWN)
    plan = objective = bound = None
    started = time.perf_counter()
    if name.answered:
        plan = realize(compiled, solver)
        objective = solver.objective_value / MICROSECONDS
        bound = solver.best_objective_bound / MICROSECONDS
    realize_s = time.perf_counter() - started
    scope = Scope.MODEL if name.answered else None
    outcome = ModelOutcome(
        model="schedule", status=name, objective_s=objective, bound_s=bound, bound_scope=scope
    )
    stage_s = {"search": search_s, "realize": realize_s}
    return plan, run_stats(compiled.model, solver, outcome, search_s + realize_s, stage_s)
