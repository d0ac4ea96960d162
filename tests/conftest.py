"""Named small fixtures shared by the tests."""

from __future__ import annotations

import numpy as np
import pytest

import cpplan
from cpplan.bench.synthetic import grpo
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload


def make_workload(*sequences_per_item: list[list[int]], grad: bool = True) -> Workload:
    """A workload with one item per argument, each a list of token lists."""
    return Workload(
        items=tuple(
            Item(id=f"i{k}", requests=tuple(Request(tokens=s, grad=grad) for s in seqs))
            for k, seqs in enumerate(sequences_per_item)
        )
    )


@pytest.fixture(scope="session")
def grpo_design() -> Workload:
    """DESIGN.md's GRPO shape: 2 prompts x 8 completions, 2,048-token system prompt, 8,192-token
    prompts, 512-token completions; one item per prompt."""
    return grpo(
        num_prompts=2, group_size=8, system_tokens=2048, prompt_tokens=8192, completion_tokens=512, seed=1
    )


@pytest.fixture(scope="session")
def small_grpo() -> Workload:
    """Eight small GRPO items (4 completions each) that several waves can hold."""
    return grpo(
        num_prompts=8,
        group_size=4,
        system_tokens=256,
        prompt_tokens=(512, 1024),
        completion_tokens=(64, 256),
        seed=3,
    )


@pytest.fixture(scope="session")
def qwen36() -> cpplan.ModelCard:
    """The shipped Qwen3.6-35B-A3B card."""
    return cpplan.load_model("qwen3.6-35b-a3b")


def without_head_parallel(card: cpplan.ModelCard) -> cpplan.ModelCard:
    """``card`` with head-parallel GDN not offered anywhere: the choice between rounds and parallel
    passing alone, as before the third mode (:meth:`cpplan.ModelCard.without_head_parallel`)."""
    return card.without_head_parallel()


@pytest.fixture(scope="session")
def qwen36_two_modes(qwen36) -> cpplan.ModelCard:
    """The shipped Qwen3.6-35B-A3B card offering only the rounds and parallel passing."""
    return without_head_parallel(qwen36)


@pytest.fixture(scope="session")
def qwen3_8b() -> cpplan.ModelCard:
    """The shipped Qwen3-8B card."""
    return cpplan.load_model("qwen3-8b")


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator."""
    return np.random.default_rng(0)


def middle_budget(workload: Workload, model: cpplan.ModelCard, cp: int) -> int:
    """A per-rank budget between the largest single item's full-sharing peak and the whole workload's:
    every item fits alone, but not all together (so plans need several waves)."""
    from cpplan.pricing.problem import Problem
    from cpplan.pricing.wave import best_wave

    problem = Problem.build(
        workload, Settings(topology=cpplan.Topology(cp=cp), model=model, memory_bytes=2**60)
    )
    single = max(best_wave(problem, [i], ("full",))[0].peak_bytes for i in range(workload.num_items))
    whole = best_wave(problem, range(workload.num_items), ("full",))[0].peak_bytes
    assert single < whole
    return (single + whole) // 2
