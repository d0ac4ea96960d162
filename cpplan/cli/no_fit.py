"""What would fit when nothing does: a ``--memory`` and a ``--topology`` that each plan the whole
workload, every one checked by planning it under the same profile before it is advised.

A check runs the profile's greedy candidate alone (:func:`checking_profile`): a run of the profile
plans whenever that candidate is valid, and greedy decides fit in milliseconds where the whole profile
spends its CP-SAT budget. The search is bounded: at most :data:`MAX_MEMORY_TRIES` checks for the
budget and one per CP size tried (up to :data:`MAX_CP_FACTOR` times the topology's, so three).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cpplan.cli.idle_ranks import idle_ranks
from cpplan.errors import InputError, NoFitError
from cpplan.plans.result import PlanResult
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import SolverProfile
from cpplan.spec.topology import AXES, Topology
from cpplan.spec.units import MAX_BYTES, format_bytes

MAX_CP_FACTOR = 8
"""The largest CP size advised is this many times the topology's (and at most :data:`MAX_CP`)."""
MAX_CP = 1024
"""The largest CP size ever advised."""
MAX_MEMORY_TRIES = 8
"""Planning calls the budget search may make: each refusal names the bytes its request needs, so a
try either plans or raises the budget to what the next refused request needs (doubling it when the
refusal names no bytes)."""
MEMORY_STEP_BYTES = 2**20
"""The advised budget is a whole number of MiB (written ``NMiB``, which ``--memory`` reads back)."""


@dataclass(frozen=True, kw_only=True)
class Advice:
    """What plans the whole workload where the given budget and topology do not, each checked by
    planning it: a budget at the same topology, a topology (a larger CP size) at the same budget."""

    memory_bytes: int | None
    """The smallest budget found (whole MiB) at which the workload plans; ``None``: none was found."""
    largest_memory_bytes: int
    """The largest budget tried."""
    topology: Topology | None
    """The smallest CP size (doubling) at which the workload plans within the budget; ``None``: none."""
    topology_plan: PlanResult | None
    """The plan made under :attr:`topology` (``None`` without one)."""
    largest_cp: int
    """The largest CP size tried (or that would have been)."""
    num_plans: int
    """Planning calls the search made."""


def with_suggestions(exc: NoFitError, problem: Problem, profile: SolverProfile) -> NoFitError:
    """``exc`` with what would plan the whole workload appended (:func:`advise`)."""
    advice = advise(exc, problem, profile)
    return NoFitError(
        f"{exc}; {advice_text(advice, problem, profile)}",
        item=exc.item,
        request=exc.request,
        rank=exc.rank,
        needed_bytes=exc.needed_bytes,
        memory_bytes=exc.memory_bytes,
    )


def advise(exc: NoFitError, problem: Problem, profile: SolverProfile) -> Advice:
    """Search a budget and a CP size that plan the whole of ``problem``'s workload under ``profile``
    (``exc``: the refusal at its own budget and topology)."""
    profile = checking_profile(profile)
    memory, largest_memory, memory_calls = fitting_memory(exc, problem, profile)
    topology, planned, largest_cp, cp_calls = fitting_cp(problem, profile)
    return Advice(
        memory_bytes=memory,
        largest_memory_bytes=largest_memory,
        topology=topology,
        topology_plan=planned,
        largest_cp=largest_cp,
        num_plans=memory_calls + cp_calls,
    )


def advice_text(advice: Advice, problem: Problem, profile: SolverProfile) -> str:
    """The advice in words, each value one a user can paste."""
    at = f"at --topology {topology_text(problem.topology)}"
    if advice.memory_bytes is not None:
        mib = advice.memory_bytes // MEMORY_STEP_BYTES
        memory = f"--memory {mib}MiB ({format_bytes(advice.memory_bytes)}) plans the whole workload {at}"
    else:
        memory = (
            f"no --memory up to {format_bytes(advice.largest_memory_bytes)} plans the whole workload {at}"
        )
    budget = f"the budget of {format_bytes(problem.memory_bytes)}"
    if advice.topology is not None:
        topology = f"--topology {topology_text(advice.topology)} plans it within {budget}"
        num_idle, num_ranks = idle_ranks(advice.topology_plan)
        if num_idle * 2 > num_ranks:
            topology += f" (though in the plan checked {num_idle} of its {num_ranks} CP ranks own no token)"
    else:
        topology = f"no CP size up to cp={advice.largest_cp} plans it within {budget}"
    return f"{memory}; {topology} (each checked by planning it under profile {profile.name})"


def fitting_memory(exc: NoFitError, problem: Problem, profile: SolverProfile) -> tuple[int | None, int, int]:
    """The budget (whole MiB) at which the workload plans at the problem's topology, found by raising
    the budget to what each refused request needs: ``(budget or None, largest tried, planning calls)``."""
    need, memory, largest = exc.needed_bytes, problem.memory_bytes, problem.memory_bytes
    for tries in range(MAX_MEMORY_TRIES):
        memory = _whole_mib(need if need is not None and need > memory else 2 * memory)
        if memory > MAX_BYTES:
            return None, largest, tries
        largest = memory
        refusal = _refusal(_at(problem, memory=memory), profile)
        if refusal is None:
            return memory, memory, tries + 1
        need = refusal.needed_bytes
    return None, largest, MAX_MEMORY_TRIES


def fitting_cp(
    problem: Problem, profile: SolverProfile
) -> tuple[Topology | None, PlanResult | None, int, int]:
    """The smallest CP size, doubling from twice the topology's up to :data:`MAX_CP_FACTOR` times it,
    at which the workload plans within the budget: ``(topology or None, its plan, largest size, calls)``.
    A size the card cannot price is passed over."""
    largest = min(problem.topology.cp * MAX_CP_FACTOR, MAX_CP)
    cp, calls = problem.topology.cp * 2, 0
    while cp <= largest:
        try:
            topology = Topology.create(**{**problem.topology.model_dump(), "cp": cp})
            at_cp = _at(problem, topology=topology)
            calls += 1
            planned = _plan(at_cp, profile)
        except InputError:
            planned = None
        if isinstance(planned, PlanResult):
            return topology, planned, largest, calls
        cp *= 2
    return None, None, largest, calls


def checking_profile(profile: SolverProfile) -> SolverProfile:
    """What checks that ``profile`` plans: its greedy candidate alone (same layouts, verified the same
    way) when it runs greedy, else ``profile`` itself. The portfolio always runs greedy unless a plan
    is already in hand, and a valid candidate is a plan, so where greedy plans the profile plans."""
    if "greedy" not in profile.strategies:
        return profile
    return profile.model_copy(update={"strategies": ("greedy",)})


def topology_text(topology: Topology) -> str:
    """The topology as ``--topology`` reads it, sizes of 1 left out (``cp=1`` when every one is)."""
    full = str(topology).split(",")
    sizes = [part for part in full[: len(AXES)] if not part.endswith("=1")] or ["cp=1"]
    return ",".join(sizes + full[len(AXES) :])


def _at(problem: Problem, *, memory: int | None = None, topology: Topology | None = None) -> Problem:
    """``problem`` with another budget or topology: the same workload and prefix tree, new settings."""
    changes = {"memory_bytes": memory} if memory is not None else {"topology": topology}
    return dataclasses.replace(problem, settings=dataclasses.replace(problem.settings, **changes))


def _plan(problem: Problem, profile: SolverProfile) -> PlanResult | NoFitError:
    """The plan of ``problem`` under ``profile``, or its refusal."""
    from cpplan.api import solve

    try:
        return solve(problem, profile)
    except NoFitError as exc:
        return exc


def _refusal(problem: Problem, profile: SolverProfile) -> NoFitError | None:
    """The refusal of planning ``problem`` under ``profile``; ``None`` when it plans."""
    found = _plan(problem, profile)
    return found if isinstance(found, NoFitError) else None


def _whole_mib(num_bytes: int) -> int:
    return -(-num_bytes // MEMORY_STEP_BYTES) * MEMORY_STEP_BYTES
