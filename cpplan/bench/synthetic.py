"""Deterministic synthetic workloads shaped like RL post-training traffic (for examples, tests and
benchmarks)."""

from __future__ import annotations

import numpy as np

from cpplan.spec.workload import Item, Request, Workload

VOCAB = 151_000


def grpo(
    *,
    num_prompts: int,
    group_size: int,
    system_tokens: int,
    prompt_tokens: int | tuple[int, int],
    completion_tokens: int | tuple[int, int],
    seed: int = 0,
    items_per_prompt: bool = True,
) -> Workload:
    """GRPO groups: a system prompt shared by all, each prompt shared by its ``group_size`` completions.

    Lengths given as ``(low, high)`` are drawn uniformly. With ``items_per_prompt`` each prompt's group is
    one item (its samples stay together); otherwise every completion is its own item.
    """
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, system_tokens)
    items = []
    for p in range(num_prompts):
        prompt = rng.integers(0, VOCAB, _length(rng, prompt_tokens))
        requests = [
            Request(
                tokens=np.concatenate(
                    [system, prompt, rng.integers(0, VOCAB, _length(rng, completion_tokens))]
                )
            )
            for _ in range(group_size)
        ]
        if items_per_prompt:
            items.append(Item(id=f"p{p}", requests=tuple(requests)))
        else:
            items.extend(Item(id=f"p{p}c{c}", requests=(r,)) for c, r in enumerate(requests))
    return Workload(items=tuple(items))


def agent_trees(
    *, num_trees: int, depth: int, branching: int, turn_tokens: tuple[int, int], seed: int = 0
) -> Workload:
    """Multi-turn agent rollouts: each tree branches ``branching`` ways at every turn; every leaf is a
    request holding its whole history. One tree is one item."""
    rng = np.random.default_rng(seed)
    items = []
    for t in range(num_trees):
        paths = [rng.integers(0, VOCAB, _length(rng, turn_tokens))]
        for _ in range(depth - 1):
            paths = [
                np.concatenate([p, rng.integers(0, VOCAB, _length(rng, turn_tokens))])
                for p in paths
                for _ in range(branching)
            ]
        items.append(Item(id=f"tree{t}", requests=tuple(Request(tokens=p) for p in paths)))
    return Workload(items=tuple(items))


def agent_rollouts(
    *,
    num_tasks: int,
    rollouts_per_task: int,
    num_turns: tuple[int, int],
    task_tokens: tuple[int, int],
    turn_tokens: tuple[int, int],
    seed: int = 0,
) -> Workload:
    """Multi-turn agent rollouts, one item per rollout: every rollout of a task starts from the task's
    prompt, then takes its own turns; request ``k`` of a rollout is its history up to turn ``k`` (each
    request a prefix of the next), so the prefix tree is task -> rollout -> turn."""
    rng = np.random.default_rng(seed)
    items = []
    for t in range(num_tasks):
        task = rng.integers(0, VOCAB, _length(rng, task_tokens))
        for r in range(rollouts_per_task):
            history, requests = task, []
            for _ in range(_length(rng, num_turns)):
                history = np.concatenate([history, rng.integers(0, VOCAB, _length(rng, turn_tokens))])
                requests.append(Request(tokens=history))
            items.append(Item(id=f"task{t}r{r}", requests=tuple(requests)))
    return Workload(items=tuple(items))


def long_tail(*, num_items: int, median_tokens: int, max_tokens: int, seed: int = 0) -> Workload:
    """Unique sequences (no sharing) with log-normal lengths capped at ``max_tokens``."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(median_tokens), 1.0, num_items).astype(int), 16, max_tokens)
    return Workload(
        items=tuple(
            Item(id=f"s{i}", requests=(Request(tokens=rng.integers(0, VOCAB, n)),))
            for i, n in enumerate(lengths.tolist())
        )
    )


def shuffled(workload: Workload, seed: int) -> Workload:
    """``workload``'s items in a random arrival order (``seed``'s permutation): GRPO rollouts of one item
    each arrive so, every group scattered when items are taken in order."""
    order = np.random.default_rng(seed).permutation(workload.num_items)
    return Workload(items=tuple(workload.items[k] for k in order))


def _length(rng: np.random.Generator, spec: int | tuple[int, int]) -> int:
    return int(spec) if isinstance(spec, int) else int(rng.integers(spec[0], spec[1] + 1))


def to_jsonl(workload: Workload) -> str:
    """The contract's JSONL text for a workload."""
    import json

    lines = []
    for item in workload.items:
        requests = [{"tokens": r.tokens.tolist(), "grad": r.grad} for r in item.requests]
        lines.append(json.dumps({"id": item.id, "requests": requests}, separators=(",", ":")))
    return "\n".join(lines) + "\n"
