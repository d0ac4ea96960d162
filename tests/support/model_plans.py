"""Random plans of a compiled joint model's space, packed: what the model counts against what packing
gives (used by the joint-model tests, masked and unmasked)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cpplan.cpsat import build_space, compile_model
from cpplan.cpsat.joint_model import ModelValues
from cpplan.cpsat.realize import wave_masks
from cpplan.cpsat.solve import Solution
from cpplan.pricing.layout import PackedLayout
from cpplan.pricing.problem import Problem


def random_packed_plans(
    problem: Problem, rng: np.random.Generator, *, rounds: int = 5
) -> Iterator[tuple[ModelValues, int, PackedLayout]]:
    """``rounds`` random plans of the model's space (waves used in order, random local layouts, each
    cross node shared with probability 1/2), each evaluated by the model and packed: ``(values, wave,
    packed layout)`` for every used wave."""
    space = build_space(problem)
    num_items = len(space.items)
    compiled = compile_model(problem, space, num_items)
    pairs = [
        (k, w)
        for k, node in enumerate(space.cross)
        for w in range(num_items)
        if any(i >= w for i in node.items)
    ]
    for _ in range(rounds):
        waves, used = [], 0
        for i in range(num_items):
            w = int(rng.integers(0, min(i, used) + 1))
            used = max(used, w + 1)
            waves.append(w)
        assignment = [(w, int(rng.integers(0, len(space.items[i].layouts)))) for i, w in enumerate(waves)]
        shared = {p for p in pairs if rng.random() < 0.5}
        values = compiled.evaluate(assignment, shared)
        solution = Solution(assignment=tuple(assignment), shared=frozenset(shared), cap=values.cap)
        for w, (items, mask) in wave_masks(problem, space, solution).items():
            yield values, w, problem.pack(items, mask)
