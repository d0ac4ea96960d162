"""A TRL-shaped log-prob pass as the adapters group it: random prompts, each with its completions."""

from __future__ import annotations

import numpy as np

import cpplan
from cpplan.integrations.rollout_items import RolloutRow, grouped_workload


def grouped_rollouts(prompt_length: int, completions: int = 4) -> cpplan.Workload:
    """2 prompts of ``prompt_length`` tokens, each with ``completions`` completions of 20 tokens (ids 3
    to 62, seed 0), one item per prompt."""
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(2):
        prompt = tuple(int(t) for t in rng.integers(3, 63, prompt_length))
        rows += [
            RolloutRow(prompt=prompt, completion=tuple(int(t) for t in rng.integers(3, 63, 20)))
            for _ in range(completions)
        ]
    return grouped_workload(rows)[0]
