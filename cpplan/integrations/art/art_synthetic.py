"""Synthetic ART tokenized results, as ``art.preprocessing.tokenize.tokenize_trajectory_groups`` leaves
them: per group a random ``prompt_id`` and ART's ``prompt_length`` (the group's common prefix, cut
before its first non-NaN log-prob, minus one), per trajectory ART's GRPO advantage and its weight
``1 / (assistant tokens + 1e-6)``. A trajectory is a prompt and turns: assistant turns (assistant mask
1, a sampled log-prob per token) and, for agents, tool outputs between them (mask 0, NaN log-probs).

``make`` builds each result; by default :class:`SyntheticResult` (the fields ART's packer reads), or
``art.preprocessing.tokenize.TokenizedResult`` through :func:`art_result_factory`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(kw_only=True)
class SyntheticResult:
    """The fields of ART's ``TokenizedResult`` that its packer reads (mutable, as ART's is)."""

    advantage: float
    token_ids: list[int]
    input_pos: list[int]
    assistant_mask: list[int]
    logprobs: list[float]
    pixel_values: Any = None
    image_grid_thw: Any = None
    weight: float = 0.0
    prompt_id: int = 0
    prompt_length: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def art_result_factory(tokenized_result_class: type) -> Callable[..., Any]:
    """A ``make`` for :func:`group_results` that builds ART's own ``TokenizedResult``."""

    def make(**fields: Any) -> Any:
        return tokenized_result_class(
            chat="",
            trajectory=None,
            choice_offsets=[],
            extra_logprobs={},
            _tokenizer=None,
            pixel_values=None,
            image_grid_thw=None,
            **fields,
        )

    return make


@dataclass(frozen=True, kw_only=True)
class GroupShape:
    """One group: ``num_trajectories`` trajectories of one prompt of ``prompt_tokens`` tokens, each
    with ``num_turns`` assistant turns of ``turn_tokens`` (a range: drawn per turn) separated by tool
    outputs of ``tool_tokens`` (a range; none when ``num_turns`` is 1)."""

    num_trajectories: int
    prompt_tokens: int
    turn_tokens: tuple[int, int]
    num_turns: int = 1
    tool_tokens: tuple[int, int] = (0, 0)


def group_results(
    shapes: Sequence[GroupShape],
    *,
    vocab_size: int,
    seed: int = 0,
    scale_rewards: bool = True,
    make: Callable[..., Any] = SyntheticResult,
) -> list[Any]:
    """Tokenized results of the groups ``shapes`` describe, group after group, as ART's tokenizer
    yields them (token ids drawn below ``vocab_size``; ``seed`` fixes everything)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        prompt = rng.integers(0, vocab_size, shape.prompt_tokens).tolist()
        trajectories = []
        for _ in range(shape.num_trajectories):
            tokens, mask, logprobs = list(prompt), [0] * len(prompt), [math.nan] * len(prompt)
            for turn in range(shape.num_turns):
                if turn:
                    tool = int(rng.integers(shape.tool_tokens[0], shape.tool_tokens[1] + 1))
                    tokens += rng.integers(0, vocab_size, tool).tolist()
                    mask += [0] * tool
                    logprobs += [math.nan] * tool
                n = int(rng.integers(shape.turn_tokens[0], shape.turn_tokens[1] + 1))
                tokens += rng.integers(0, vocab_size, n).tolist()
                mask += [1] * n
                logprobs += (-rng.exponential(1.0, n)).tolist()
            trajectories.append((tokens, mask, logprobs))
        rewards = rng.random(shape.num_trajectories)
        mean = float(rewards.mean())
        std = float(rewards.std())
        first_logprob = min(
            next(i for i, p in enumerate(lp) if not math.isnan(p)) for _, _, lp in trajectories
        )
        prompt_length = max(min(_common_prefix([t for t, _, _ in trajectories]), first_logprob) - 1, 0)
        prompt_id = int(rng.integers(-(2**63), 2**63 - 1, dtype=np.int64))
        for (tokens, mask, logprobs), reward in zip(trajectories, rewards, strict=True):
            advantage = float(reward) - mean
            if scale_rewards:
                advantage /= std + 1e-6
            out.append(
                make(
                    advantage=advantage,
                    token_ids=tokens,
                    input_pos=list(range(len(tokens))),
                    assistant_mask=mask,
                    logprobs=logprobs,
                    weight=1 / (sum(mask) + 1e-6),
                    prompt_id=prompt_id,
                    prompt_length=prompt_length,
                )
            )
    return out


def _common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence shares."""
    n = 0
    for column in zip(*sequences, strict=False):
        if len(set(column)) != 1:
            break
        n += 1
    return n


GRPO_SHAPES = {
    "grpo-2048": [
        GroupShape(num_trajectories=8, prompt_tokens=1024, turn_tokens=(256, 1024)) for _ in range(4)
    ],
    "grpo-8192": [
        GroupShape(num_trajectories=8, prompt_tokens=2048, turn_tokens=(512, 4096)) for _ in range(4)
    ],
    "agent-16384": [
        GroupShape(
            num_trajectories=4,
            prompt_tokens=1536,
            turn_tokens=(64, 512),
            num_turns=6,
            tool_tokens=(128, 1024),
        )
        for _ in range(4)
    ],
}
"""Step shapes for the benchmark, after ART's examples: GRPO steps of groups of 8 trajectories (a
few-hundred-token to few-thousand-token answers under 1-2k-token prompts) and an agent step (groups of
4 multi-turn trajectories with tool outputs masked). The number in the name is the ``seq_len`` used."""


__all__ = ["GRPO_SHAPES", "GroupShape", "SyntheticResult", "art_result_factory", "group_results"]
