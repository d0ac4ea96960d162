"""The GRPO workloads the planner tests share: groups arriving in order or shuffled."""

from __future__ import annotations

from cpplan.bench.synthetic import grpo, shuffled
from cpplan.spec.workload import Workload


def grouped_and_shuffled(seed: int = 5) -> tuple[Workload, Workload]:
    """Four GRPO groups of 8 rollouts (one item each, prompts of 2-4K tokens behind a 256-token
    system prompt): in arrival order by group, and the same items shuffled (which scatters every
    group when items are taken in order)."""
    grouped = grpo(
        num_prompts=4,
        group_size=8,
        system_tokens=256,
        prompt_tokens=(2000, 4000),
        completion_tokens=(200, 800),
        items_per_prompt=False,
        seed=seed,
    )
    return grouped, shuffled(grouped, seed)


def shuffled_completions(seed: int = 0) -> Workload:
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
    return shuffled(base, seed)


def rollouts(num_prompts: int, group_size: int, *, system_tokens: int = 256, seed: int = 3) -> Workload:
    """``num_prompts`` GRPO groups of ``group_size`` rollouts (prompts of 600-1,200 tokens, completions
    of 100-300), one item per rollout, in group order, behind a ``system_tokens`` prefix every request
    shares (none at 0)."""
    return grpo(
        num_prompts=num_prompts,
        group_size=group_size,
        system_tokens=system_tokens,
        prompt_tokens=(600, 1200),
        completion_tokens=(100, 300),
        items_per_prompt=False,
        seed=seed,
    )
