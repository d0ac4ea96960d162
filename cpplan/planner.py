"""The planner a trainer keeps for a run: settings and profile resolved once, one plan per step.

``Planner(model=..., topology=..., memory_bytes=..., solver="runtime")`` loads the card, parses the
memory size, resolves the card for the topology, depth and phase, and loads the solver profile once;
the resolved card carries what every step reads from it (its coefficient vectors,
:class:`~cpplan.spec.card.CardConstants`, derived when it is resolved) and, when the profile runs
CP-SAT, imports OR-Tools and runs one trivial solve, so that the first step pays neither.
``planner.plan(workload)`` then builds the step's problem and runs the portfolio
(:func:`cpplan.planners.portfolio.solve`) within the profile's time budget (or the one given),
counted from the call. :func:`cpplan.plan` is the one-shot form: a planner made for a single call.

Under ``dp > 1`` a DP rank plans only its own share: ``planner.plan(workload, replica=k)`` partitions
the items over the replicas (:mod:`cpplan.planners.replica_partition`: deterministic, the same on every
rank) and plans replica ``k``'s items as a ``dp = 1`` problem at the same CP size, within the budget;
``replica="all"`` plans every replica's share the same way and assembles the step's plan (padding waves
under equal waves). ``planner.plan_async(...)`` runs a plan on the planner's own worker thread and
returns a :class:`concurrent.futures.Future`, so a trainer plans step k + 1 while step k runs.
"""

from __future__ import annotations

import gc
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import numpy as np

from cpplan.calibration.online import OnlineCalibration, Verdict, write_log
from cpplan.calibration.planner_state import (
    corrected_settings,
    observation_of,
    read_state,
    replay,
    state_header,
    state_settings,
)
from cpplan.errors import InputError
from cpplan.planners import Strategy
from cpplan.planners.cpsat_strategy import ensure_solver
from cpplan.planners.deadline import Deadline
from cpplan.planners.portfolio import solve
from cpplan.planners.replica_partition import (
    ReplicaPartition,
    assemble,
    check_replica,
    partition_items,
    replica_settings,
    replica_workload,
)
from cpplan.plans.plan import Candidate, SolverStats
from cpplan.plans.result import PlanResult
from cpplan.pricing.problem import Problem
from cpplan.spec.card import ModelCard, Phase
from cpplan.spec.correction import Correction
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Workload


class Planner:
    """Plans one workload per call under fixed settings and a solver profile.

    Everything that does not change between steps (the card and its resolution, the profile) is
    loaded and checked when the planner is made, so a bad card or profile fails here, not mid-run.

    ``memory_bytes`` is the bytes per rank free for the wave, above what is resident before it: an
    integer number of bytes, or a size string read exactly as ``--memory`` reads it. Decimal units are
    powers of ten and binary ones powers of two: ``"8 GB"`` is 8,000,000,000 bytes and ``"8GiB"``
    8,589,934,592; a unit without its ``B`` (``"8G"``) is refused as ambiguous. The parsed integer is
    :attr:`memory_bytes`.
    """

    def __init__(
        self,
        *,
        model: ModelCard | str | Path,
        topology: Topology | str | None = None,
        memory_bytes: int | str,
        solver: SolverProfile | str | Path = "runtime",
        num_layers: int | None = None,
        phase: Phase = "cold",
    ) -> None:
        settings = Settings.from_user(
            topology=topology, model=model, memory_bytes=memory_bytes, num_layers=num_layers, phase=phase
        )
        self._start(settings, resolve_profile(solver))

    def __getstate__(self) -> dict:
        """What a copy in another process needs (a plan-ahead worker): the settings, profile and learning;
        not the worker thread, the lock, nor what is kept for the next call."""
        state = self.__dict__.copy()
        for name in ("_worker", "_lock", "_steps", "_partitioned"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._worker, self._lock, self._steps, self._partitioned = None, threading.Lock(), {}, None

    @property
    def memory_bytes(self) -> int:
        """The per-rank budget this planner plans against, in bytes (``memory_bytes`` parsed:
        ``"8 GB"`` gives 8,000,000,000)."""
        return self.settings.memory_bytes

    def _start(self, settings: Settings, profile: SolverProfile) -> None:
        """Set the planner up for ``settings`` and ``profile`` (what :meth:`__init__` and :meth:`load`
        share)."""
        self.settings = settings
        self.profile = profile
        self.card = self.settings.card
        """The card resolved for these settings (a card that cannot price them fails here)."""
        self._profiles: dict[float, SolverProfile] = {}
        self._learning: OnlineCalibration | None = None
        """What :meth:`observe` has taught (made on first use, or by :meth:`load`)."""
        self._steps: dict[int, tuple[PlanResult, int]] = {}
        """The step number of each of the last :data:`_KEPT_RESULTS` observed plans, by identity."""
        self._partitioned: tuple[Workload, ReplicaPartition] | None = None
        """The last workload partitioned over the replicas and its partition (kept for the next call)."""
        self._corrected: tuple[Correction, Settings] | None = None
        """The last learned correction and the settings with it (:meth:`_settings_now`)."""
        self._replica_settings: tuple[Settings, Settings] | None = None
        """The (corrected) settings last planned with and their one-replica form."""
        self._late_s: deque[float] = deque(maxlen=LATE_WINDOW)
        """How late each recent call under the clock ended past the budget it aimed at (:meth:`_aimed`)."""
        self._share_floor_s = 0.0
        """The floor of a replica's share on this machine: the least time a share of this planner's last
        partitioned step under the clock took until its greedy plan was verified, the problem's build
        included (0 before any; :func:`_share_budget_s`)."""
        self._cpu_shares: deque[float] = deque(maxlen=LATE_WINDOW)
        """The share of a CPU each recent call under the clock got: its thread's CPU seconds over its wall
        seconds (:meth:`_cpu_share`)."""
        self._worker: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        if "cpsat" in self.profile.strategies:
            ensure_solver()

    def plan(
        self,
        workload: Workload,
        time_budget_s: float | None = None,
        *,
        replica: int | Literal["all"] | None = None,
        planners: Mapping[str, Strategy] | None = None,
        started_s: float | None = None,
    ) -> PlanResult:
        """Plan ``workload`` within ``time_budget_s`` (default: the profile's; a positive, finite number
        of seconds, else :class:`~cpplan.errors.InputError`), counted from ``started_s`` (a
        :func:`time.perf_counter` instant; default: this call). ``planners`` replaces or adds strategies
        by name. A budget too short for the search still gets a complete plan: the portfolio packs it at
        once with full sharing and its candidates say so. Raises :class:`~cpplan.errors.NoFitError` when
        no strategy yields a valid plan.

        ``replica``: a replica index ``k`` (``0 <= k < dp``, else :class:`InputError`) plans only replica
        ``k``'s share of the partitioned step (:meth:`partition`) as a ``dp = 1`` problem, the budget its
        own: its result's problem holds those items only (``result.problem.workload``), under ``dp = 1``
        (what a DP rank calls). ``"all"`` plans every replica's share and returns the step's plan
        assembled from them, over the whole workload, within the one budget (:meth:`_plan_step`).
        ``None`` is ``"all"`` where :meth:`partitions` says so (``dp > 1`` under the runtime and trainer
        profiles), else the whole step planned jointly."""
        wall_0, cpu_0 = time.perf_counter(), time.thread_time()
        started = wall_0 if started_s is None else started_s
        if not isinstance(workload, Workload):
            raise InputError(
                "must be a cpplan.Workload (read a file with Workload.from_jsonl), "
                f"got {type(workload).__name__}",
                field="workload",
            )
        profile = self._profile_for(time_budget_s)
        k = None if replica is None or replica == "all" else check_replica(replica, self.settings.topology)
        with _no_collection_under(profile):
            result = self._plan_now(workload, profile, k, replica, planners, started)
        wall_s = time.perf_counter() - wall_0
        if not profile.deterministic and wall_s > 0:
            self._cpu_shares.append(min((time.thread_time() - cpu_0) / wall_s, 1.0))
        return result

    def _plan_now(
        self,
        workload: Workload,
        profile: SolverProfile,
        k: int | None,
        replica: int | Literal["all"] | None,
        planners: Mapping[str, Strategy] | None,
        started: float,
    ) -> PlanResult:
        """:meth:`plan` once its arguments are checked: replica ``k``'s share, the partitioned step, or
        the whole step planned jointly."""
        if k is None and (replica == "all" or self.partitions(workload, profile)):
            return self._plan_step(workload, self._slowed(profile), planners, started)
        aimed = self._aimed(profile)
        if k is not None:
            result = self._plan_replica(workload, self.partition(workload), k, aimed, planners, started)
        else:
            deadline = Deadline.of_profile(aimed, start_s=started)
            result = solve(
                Problem.build(workload, self._settings_now()), aimed, planners=planners, deadline=deadline
            )
        late_s = time.perf_counter() - started - aimed.time_budget_s
        if not profile.deterministic and late_s <= MAX_AIM_SHARE * profile.time_budget_s:
            self._late_s.append(late_s)
        return result

    def _aimed(self, profile: SolverProfile) -> SolverProfile:
        """``profile`` with the budget this call aims at: under the clock, the budget less how late the
        recent calls of one problem (a replica's share, or the whole step unpartitioned) ended past the
        budget they aimed at (the :data:`AIM_PERCENTILE` th percentile of the last :data:`LATE_WINDOW`,
        so that a call ends in time where a quarter of them ended late, and one hiccup does not cut the
        next calls short; a call later than
        :data:`MAX_AIM_SHARE` of the budget is not counted: its floor, not the aim, made it late), so
        that on a busy machine, where the ``[timing]`` estimates run short, a call still ends within its
        budget; its estimates are those of :meth:`_slowed`. A deterministic profile as it is."""
        profile = self._slowed(profile)
        if profile.deterministic or not self._late_s:
            return profile
        late_s = float(np.percentile(self._late_s, AIM_PERCENTILE))
        early_s = min(max(late_s, 0.0), MAX_AIM_SHARE * profile.time_budget_s)
        return profile if early_s == 0.0 else profile.with_time_budget(profile.time_budget_s - early_s)

    def _cpu_share(self) -> float:
        """The share of a CPU this planner's calls get: the median over the last :data:`LATE_WINDOW`
        calls under the clock of their thread's CPU seconds over their wall seconds (1 before any; at
        least :data:`MIN_CPU_SHARE`). On a quiet machine it is about 1; beside busy processes, or beside
        a trainer's threads holding the interpreter lock, less."""
        if not self._cpu_shares:
            return 1.0
        return max(statistics.median(self._cpu_shares), MIN_CPU_SHARE)

    def _slowed(self, profile: SolverProfile) -> SolverProfile:
        """``profile`` with its ``[timing]`` estimates in the wall seconds of this machine now: the
        estimates hold up to a call getting :data:`ESTIMATED_CPU_SHARE` of a CPU (they were measured
        beside busy processes), so where :meth:`_cpu_share` is less, what work needs is multiplied by how
        much less (:meth:`~cpplan.spec.profile.TimingParams.slowed`; the reserves for realizing and verifying
        as they are: :meth:`_aimed` corrects where they run short): every stage expects its work to take
        longer and takes up only what it can finish (the ownership model fewer free columns, the
        proposers stopping earlier to leave it that), instead of building what it then has no time to
        search. A deterministic profile as it is (its estimates are never read)."""
        share = self._cpu_share() / ESTIMATED_CPU_SHARE
        if profile.deterministic or share >= 1.0:
            return profile
        return profile.model_copy(update={"timing": profile.timing.slowed(1.0 / share)})

    def plan_async(
        self,
        workload: Workload,
        time_budget_s: float | None = None,
        *,
        replica: int | Literal["all"] | None = None,
        planners: Mapping[str, Strategy] | None = None,
    ) -> Future[PlanResult]:
        """:meth:`plan` on the planner's own worker thread (one, so plans run in the order submitted):
        a :class:`~concurrent.futures.Future` of its result (or of its error). The budget counts from
        when the plan starts on the worker, not from submission. Bad arguments (a replica outside dp, a
        budget that is not positive) fail here, before anything is queued."""
        if time_budget_s is not None:
            self._profile_for(time_budget_s)
        if replica is not None and replica != "all":
            check_replica(replica, self.settings.topology)
        with self._lock:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpplan-plan")
            worker = self._worker
        return worker.submit(self.plan, workload, time_budget_s, replica=replica, planners=planners)

    def close(self) -> None:
        """Stop the worker thread of :meth:`plan_async` once its queued plans are done (a later
        :meth:`plan_async` starts a new one)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True)

    def partition(self, workload: Workload) -> ReplicaPartition:
        """Which DP replica plans each item of ``workload``
        (:func:`~cpplan.planners.replica_partition.partition_items`): a function of the workload and the
        settings alone, so every rank computes the same one; the last one is kept for the next call."""
        with self._lock:
            kept = self._partitioned
        if kept is not None and kept[0] is workload:
            return kept[1]
        found = partition_items(workload, self.card, self.settings.topology)
        with self._lock:
            self._partitioned = (workload, found)
        return found

    def _settings_now(self) -> Settings:
        """The settings with the learned correction applied, made once per distinct correction (so the
        card is resolved once for it, not once per call)."""
        if self._learning is None:
            return self.settings
        correction = self._learning.correction
        kept = self._corrected
        if kept is None or kept[0] != correction:
            kept = (correction, corrected_settings(self.settings, self._learning))
            self._corrected = kept
        return kept[1]

    def _one_replica_settings(self) -> Settings:
        """The settings (learned correction applied) for one replica's share, made once per settings."""
        settings = self._settings_now()
        kept = self._replica_settings
        if kept is None or kept[0] is not settings:
            kept = (settings, replica_settings(settings))
            self._replica_settings = kept
        return kept[1]

    def _plan_replica(
        self,
        workload: Workload,
        partition: ReplicaPartition,
        replica: int,
        profile: SolverProfile,
        planners: Mapping[str, Strategy] | None,
        started: float,
        *,
        checked: bool = False,
    ) -> PlanResult:
        """Replica ``replica``'s share of ``workload`` planned as a ``dp = 1`` problem, the budget
        counted from ``started`` (``checked``: its items were validated already, with the step's)."""
        deadline = Deadline.of_profile(profile, start_s=started)
        share = replica_workload(workload, partition.items(replica), replica)
        problem = Problem.build(share, self._one_replica_settings(), checked=checked)
        return solve(problem, profile, planners=planners, deadline=deadline)

    def partitions(self, workload: Workload, profile: SolverProfile | None = None) -> bool:
        """Whether a call without a replica plans ``workload`` partitioned by replica: the profile
        (default: the planner's) says so (``[schedule] partition_replicas``, on in ``runtime`` and
        ``trainer``), ``dp > 1`` on fixed CP groups, and every replica gets an item."""
        topology = self.settings.topology
        wanted = (profile or self.profile).schedule.partition_replicas
        return wanted and topology.dp > 1 and not topology.dynamic_cp and workload.num_items >= topology.dp

    def _plan_step(
        self,
        workload: Workload,
        profile: SolverProfile,
        planners: Mapping[str, Strategy] | None,
        started: float,
    ) -> PlanResult:
        """Every replica's share planned as :meth:`_plan_replica` plans it, assembled into the step's
        plan over the whole workload, within one budget counted from ``started`` (the step's problem is
        built first): under the clock each share gets the time :meth:`_share_budget_s` gives it; under a
        deterministic profile each share gets the whole budget, so its waves are ``replica=k``'s."""
        partition = self.partition(workload)
        step = Problem.build(workload, self._settings_now(), tree_now=False)
        end_s = started + profile.time_budget_s
        results, floors_s = [], []
        for k in range(partition.num_replicas):
            share, share_started = profile, time.perf_counter()
            if not profile.deterministic:
                floor_s = min(floors_s, default=self._share_floor_s)
                budget_s = _share_budget_s(end_s - share_started, partition.num_replicas - k, floor_s)
                share = profile.with_time_budget(budget_s)
            args = (workload, partition, k, share, planners, share_started)
            results.append(self._plan_replica(*args, checked=True))
            searched_s = math.fsum(c.wall_s for c in results[-1].candidates if c.strategy != "greedy")
            floors_s.append(time.perf_counter() - share_started - searched_s)  # until greedy's plan
        if not profile.deterministic:
            self._share_floor_s = min(floors_s)
        plan = assemble(step, partition, [r.plan for r in results], [r.problem for r in results])
        candidates = tuple(
            Candidate(
                strategy=r.strategy,
                cost_s=r.cost_s,
                valid=True,
                reason=f"replica {k}: {next(c.reason for c in r.candidates if c.strategy == r.strategy)}",
                wall_s=r.wall_s,
                num_waves=r.plan.num_waves,
            )
            for k, r in enumerate(results)
        )
        outcomes = tuple(o for r in results for o in r.solver.outcomes)  # every replica's runs, in order
        return PlanResult(
            problem=step,
            plan=plan,
            candidates=candidates,
            solver=SolverStats(outcomes=outcomes, wall_s=time.perf_counter() - started),
            profile=profile.name,
            wall_s=time.perf_counter() - started,
        )

    # ------------------------------------------------------------------------------------- learning

    @property
    def learning(self) -> OnlineCalibration:
        """What this planner has learned from :meth:`observe` (created, empty, on first use)."""
        if self._learning is None:
            self._learning = OnlineCalibration(self.settings.card_alone)
        return self._learning

    @property
    def correction(self) -> Correction:
        """The learned correction later plans budget against (the identity before any observation)."""
        return self.learning.correction

    def observe(
        self,
        result: PlanResult,
        *,
        wave: int,
        rank: int,
        peak_bytes: int | None = None,
        seconds: float | None = None,
    ) -> tuple[Verdict, ...]:
        """Record what wave ``wave`` of ``result`` (a plan of this planner) measured on CP rank ``rank``:
        ``peak_bytes`` above the pre-wave baseline (the quantity ``memory_bytes`` budgets) and/or the
        wave's ``seconds`` there. Later plans price with the correction learned from every observation
        (:mod:`cpplan.calibration.online`); the verdicts say whether each value was believed. Raises
        :class:`InputError` for a result of another context, an unknown wave or rank, or a peak that is
        not a non-negative whole number of bytes (seconds: a positive finite number)."""
        observation = observation_of(
            self.learning,
            result,
            step=self._step_of(result),
            wave=wave,
            rank=rank,
            peak_bytes=peak_bytes,
            seconds=seconds,
        )
        return self.learning.observe(observation)

    def _step_of(self, result: PlanResult) -> int:
        """The number of the plan ``result`` among those observed (in order of first observation)."""
        steps = self._steps
        key = id(result)
        if key in steps and steps[key][0] is result:
            return steps[key][1]
        known = [o.step for o in self.learning.observations]
        step = max(known, default=-1) + 1
        steps[key] = (result, step)
        while len(steps) > _KEPT_RESULTS:
            steps.pop(next(iter(steps)))
        return step

    def save(self, path: str | Path) -> None:
        """Write the planner's settings, solver profile, trust policy and every observation, in order,
        as JSON lines (:meth:`load` makes the same planner, with the same correction, from it)."""
        learning = self.learning
        write_log(path, state_header(self.settings, self.profile, learning), learning.observations)

    @classmethod
    def load(cls, path: str | Path) -> Planner:
        """The planner :meth:`save` wrote: same settings, profile and policy, every observation replayed
        in order (so the same correction, byte for byte). Errors name the file, line and field."""
        header, observations = read_state(path)
        settings = state_settings(header, path)
        planner = cls.__new__(cls)
        try:
            planner._start(settings, header["solver"])
        except InputError as exc:
            raise InputError(str(exc), file=str(path), line=1) from None
        planner._learning = OnlineCalibration(planner.settings.card_alone, header["policy"])
        replay(planner._learning, observations, path)
        return planner

    def _profile_for(self, time_budget_s: float | None) -> SolverProfile:
        """The profile with ``time_budget_s`` (checked by :meth:`SolverProfile.with_time_budget`), made
        once per distinct budget."""
        if time_budget_s is None:
            return self.profile
        valid = isinstance(time_budget_s, int | float) and not isinstance(time_budget_s, bool)
        if valid and time_budget_s in self._profiles:
            return self._profiles[time_budget_s]
        profile = self.profile.with_time_budget(time_budget_s)
        self._profiles[profile.time_budget_s] = profile
        return profile

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"Planner(model={s.model.name!r}, topology='{s.topology}', memory_bytes={s.memory_bytes}, "
            f"solver={self.profile.name!r}, num_layers={s.num_layers}, phase={s.phase!r})"
        )


_KEPT_RESULTS = 16
"""Plans whose step numbers the planner remembers (by identity) for :meth:`Planner.observe`."""


@contextmanager
def _no_collection_under(profile: SolverProfile) -> Iterator[None]:
    """Under the clock, Python's cyclic garbage collector paused for the call (the collection runs after
    it, if due): a full collection over a large process takes tens of milliseconds, a budget's worth,
    and would land in whichever call it falls in. A deterministic profile leaves it alone. Another
    thread's call that paused it first keeps it paused until that call ends."""
    paused = not profile.deterministic and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


LATE_WINDOW = 8
"""Recent calls whose lateness :meth:`Planner._aimed` reads (a percentile of it sets the aim)."""

AIM_PERCENTILE = 75
"""The percentile of the recent calls' lateness a call aims early by (the 95th percentile of the calls'
time is what a budget bounds; of 8 calls, one hiccup alone does not move it)."""

MAX_AIM_SHARE = 0.5
"""A call aims at most this share of its budget early, however late the recent calls ended."""

MIN_CPU_SHARE = 0.15
"""The least share of a CPU :meth:`Planner._cpu_share` reports (the estimates grow at most five-fold)."""

ESTIMATED_CPU_SHARE = 0.75
"""The share of a CPU down to which the profile's ``[timing]`` estimates hold as written (measured on
the 2-core machine with room to spare: the tightest, the ownership model's build on the agent step, is
about one and a half times its CPU time); a call getting less scales them (:meth:`Planner._slowed`)."""

_MIN_SHARE_S = 1e-3
"""The least budget a replica's share gets in a partitioned step under the clock (with less, its greedy
packs the share at once with full sharing)."""


def _share_budget_s(left_s: float, num_left: int, floor_s: float) -> float:
    """The budget of the next of ``num_left`` replica shares of a partitioned step under the clock,
    ``left_s`` before the step's end: an even part of it where every share still to plan can have its
    floor (``floor_s``: the least time a share took until its greedy plan was verified, in this step,
    else in the planner's last one), else none beyond the floor (:data:`_MIN_SHARE_S`: greedy packs the
    share at once and the later stages are skipped), so that no share spends on search the time the
    floors of the shares after it need."""
    if left_s < num_left * floor_s:
        return _MIN_SHARE_S
    return max(left_s / num_left, _MIN_SHARE_S)


def resolve_profile(solver: SolverProfile | str | Path | None) -> SolverProfile:
    """A solver profile as given, or loaded by name or path (``None``: ``runtime``); anything else is
    an :class:`~cpplan.errors.InputError` naming the field."""
    if not isinstance(solver, SolverProfile | str | Path | None):
        raise InputError(
            f"must be a SolverProfile, a name or a path, got {type(solver).__name__}", field="solver"
        )
    return solver if isinstance(solver, SolverProfile) else load_solver(solver or "runtime")
