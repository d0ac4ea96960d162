"""CP-SAT earns its place in the portfolio: on workloads where the joint model regroups what greedy
cannot, the chosen plan is CP-SAT's, strictly cheaper than every other strategy's. A CP-SAT that never
returns a plan (stubbed to "infeasible") fails these tests; the never-worse-than-greedy test alone
cannot see it, since greedy's plan is always a candidate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cpplan
from cpplan.bench.synthetic import grpo

MODEL = cpplan.load_model(Path(__file__).resolve().parents[1] / "data" / "qwen36_uncalibrated.toml")
GIB = 2**30


def shuffled_grpo(seed: int) -> cpplan.Workload:
    """Three GRPO prompts of four completions each, every completion its own item, in a shuffled
    arrival order (groups interleaved)."""
    base = grpo(
        num_prompts=3,
        group_size=4,
        system_tokens=256,
        prompt_tokens=(1500, 2500),
        completion_tokens=(200, 500),
        seed=seed,
        items_per_prompt=False,
    )
    order = np.random.default_rng(seed).permutation(base.num_items)
    return cpplan.Workload(items=tuple(base.items[k] for k in order))


@pytest.mark.parametrize("seed", [1, 2])
def test_cpsat_wins_where_the_joint_model_beats_greedy(seed):
    """Shuffled GRPO completions at CP2 under a 4 GiB budget, deterministic profile: CP-SAT's
    candidate is valid and at least 3% cheaper than every other strategy's (greedy, full sharing,
    seeded), so the portfolio chooses it and returns its plan, with the solver's optimal status."""
    result = cpplan.plan(
        shuffled_grpo(seed),
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
