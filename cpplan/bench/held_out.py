"""The held-out-style steps the bound is measured on (``benchmarks/bench_bound.py``, ``bench_budget.py``)
and tested against: shaped like the bound issue's, generated with seeds of their own."""

from __future__ import annotations

from cpplan.bench import synthetic
from cpplan.spec.workload import Workload


def grpo_step() -> Workload:
    """Two prompts of eight rollouts behind a 2,048-token system prompt (8,192-token prompts, 256 to
    1,024-token completions)."""
    return synthetic.grpo(
        num_prompts=2,
        group_size=8,
        system_tokens=2048,
        prompt_tokens=8192,
        completion_tokens=(256, 1024),
        seed=11,
    )


def agent_trees_step() -> Workload:
    """Four agent trees of depth 3, three branches a turn, 1,024 to 4,096 tokens a turn."""
    return synthetic.agent_trees(num_trees=4, depth=3, branching=3, turn_tokens=(1024, 4096), seed=7)


def long_tail_step() -> Workload:
    """Sixteen unrelated requests, median 4,096 tokens, the longest 32,768."""
    return synthetic.long_tail(num_items=16, median_tokens=4096, max_tokens=32768, seed=3)


def long_unique_step() -> Workload:
    """Ten unrelated long requests, median 19,500 tokens, the longest 24,000."""
    return synthetic.long_tail(num_items=10, median_tokens=19500, max_tokens=24000, seed=5)
