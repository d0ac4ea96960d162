"""The GRPO workloads the greedy, LNS and dynamic-CP tests share: groups arriving in order or shuffled."""

from __future__ import annotations

import numpy as np

from cpplan.bench.synthetic import grpo
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
    order = np.random.default_rng(seed).permutation(grouped.num_items)
    return grouped, Workload(items=tuple(grouped.items[k] for k in order))
