"""One budget per planning call, shared out to the stages by the profile's shares.

Under the clock the budget is seconds from the call: the proposers run until the time kept for the
ownership stage and for verification, each proposer within its own share, and the ownership stage until
the time kept for verification. Under a deterministic profile the budget is CP-SAT deterministic time
(its work counter): each CP-SAT stage's limit is its share times the budget, and nothing reads the
clock. So ``--time-budget`` means the same under every profile: the one budget the stages share.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cpplan.planners.deadline import Deadline, verify_reserve_s
from cpplan.pricing.problem import Problem
from cpplan.spec.profile import CpSatParams, SolverProfile


@dataclass(frozen=True, kw_only=True)
class Budget:
    """A planning call's budget: its deadline, and what each stage may take of it."""

    profile: SolverProfile
    """The profile whose budget and shares these are."""

    deadline: Deadline
    """The whole call's deadline (one that never expires under a deterministic profile)."""

    verify_by: Deadline
    """Until when the stages may search: the deadline less what verifying a plan takes."""

    realize_s: float = 0.0
    """What realizing the ownership stage's answer keeps back (the profile's ``[timing]`` estimate)."""

    @classmethod
    def start(cls, problem: Problem, profile: SolverProfile, deadline: Deadline | None = None) -> Budget:
        """The budget of planning ``problem`` under ``profile`` from now (or from ``deadline``'s start,
        when given: a caller that started the clock before building the problem)."""
        if deadline is None:
            deadline = Deadline.of_profile(profile)
        deadline = replace(deadline, timing=profile.timing)  # every stage decides by the profile's
        verify_by = deadline.less(verify_reserve_s(problem, profile.timing))
        realize_s = profile.timing.realize_reserve_s(problem.logical_tokens(range(problem.num_items)))
        return cls(profile=profile, deadline=deadline, verify_by=verify_by, realize_s=realize_s)

    @property
    def deterministic(self) -> bool:
        """Whether no stage reads the clock."""
        return self.deadline.deterministic

    def proposers_by(self) -> Deadline:
        """Until when the proposers may run: the search deadline less the time kept for the ownership
        stage when the profile runs CP-SAT: its share, and at least what its model without free columns
        needs to be built, searched and realized (the ``[timing]`` estimates: where they have grown on a
        busy machine, the proposers stop earlier rather than leave the deciding stage no time)."""
        if "cpsat" not in self.profile.strategies:
            return self.verify_by
        least_s = self.profile.timing.ownership_needs_s(0, 0) + self.realize_s
        return self.verify_by.less(max(self.profile.ownership.share * self.profile.time_budget_s, least_s))

    def stage(self, share: float, by: Deadline) -> Deadline:
        """A stage's deadline: ``share`` of the budget from now, and never past ``by``."""
        return by.within(share * self.profile.time_budget_s)

    def work_limit(self, share: float) -> float | None:
        """A CP-SAT stage's deterministic time limit: ``share`` of the budget under a deterministic
        profile; ``None`` under the clock."""
        return share * self.profile.time_budget_s if self.deterministic else None

    def cpsat_params(self, share: float) -> CpSatParams:
        """The profile's CP-SAT parameters with the deterministic limit of a stage of ``share``."""
        return self.profile.cpsat.model_copy(update={"deterministic_time_s": self.work_limit(share)})
