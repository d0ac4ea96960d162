"""CP-SAT earns its place in the portfolio: on workloads where the joint model regroups what greedy
cannot, the chosen plan is CP-SAT's, strictly cheaper than every other strategy's. A CP-SAT that never
returns a plan (stubbed to "infeasible") fails these tests; the never-worse-than-greedy test alone
cannot see it, since greedy's plan is always a candidate."""

from __future__ import annotations

from pathlib import Path

import pytest

import cpplan
from tests.support.grpo_arrivals import shuffled_completions

MODEL = cpplan.load_model(Path(__file__).resolve().parents[1] / "data" / "qwen36_uncalibrated.toml")
GIB = 2**30


@pytest.mark.parametrize("seed", [1, 2])
def test_cpsat_wins_where_the_joint_model_beats_greedy(seed):
    """Shuffled GRPO completions at CP2 under a 4 GiB budget, deterministic profile: CP-SAT's
    candidate is valid and at least 3% cheaper than every other strategy's (greedy, full sharing,
    seeded), so the portfolio chooses it and returns its plan, with the solver's optimal status."""
    result = cpplan.plan(
        shuffled_completions(seed),
        topology=cpplan.Topology(cp=2),
        model=MODEL,
        memory_bytes=4 * GIB,
        num_layers=4,
        solver="deterministic",
    )
    by_strategy = {c.strategy: c for c in result.candidates}
    cpsat = by_strategy.pop("cpsat")
    assert cpsat.valid, cpsat.reason
    assert set(by_strategy) == {"greedy", "full_sharing", "seeded"}
    others = min(c.cost_s for c in by_strategy.values() if c.valid)
    assert cpsat.cost_s < 0.97 * others, (cpsat.cost_s, others)
    assert result.strategy == "cpsat"
    assert result.cost_s == pytest.approx(cpsat.cost_s, rel=1e-12)
    assert result.solver.status == "optimal"
