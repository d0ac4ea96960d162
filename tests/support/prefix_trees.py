"""Shared test helpers: hypothesis-generated prefix-tree workloads and hand-built plans over them."""

from __future__ import annotations

import dataclasses
import itertools
from functools import cache

import numpy as np
from hypothesis import strategies as st

from cpplan import Item, Plan, PrefixTree, Problem, Request, Topology, Workload, load_model
from cpplan.pricing.wave import price_wave
from cpplan.spec.settings import Settings

LAYOUTS = ("full", "none", "depth:1", "depth:2", "min_span:3")


@st.composite
def prefix_workloads(
    draw, *, max_requests: int = 6, vocab: int = 6, max_tail: int = 12, masks: bool = False
) -> Workload:
    """Requests that branch off earlier ones at random cuts (sometimes identical to, or a prefix of,
    another request); a tiny vocabulary adds accidental sharing. Consecutive requests form items.
    With ``masks``, most requests carry a random ``loss_mask`` (some none, to mix both kinds)."""
    sequences: list[list[int]] = []
    for _ in range(draw(st.integers(1, max_requests))):
        prefix: list[int] = []
        if sequences and draw(st.booleans()):
            base = sequences[draw(st.integers(0, len(sequences) - 1))]
            prefix = base[: draw(st.integers(0, len(base)))]
        tail = draw(st.lists(st.integers(0, vocab - 1), min_size=0 if prefix else 1, max_size=max_tail))
        sequences.append(prefix + tail)
    outputs = draw(
        st.lists(
            st.sampled_from(("loss", "loss", "logits", "none")),
            min_size=len(sequences),
            max_size=len(sequences),
        )
    )
    breaks = draw(st.lists(st.booleans(), min_size=len(sequences), max_size=len(sequences)))
    items, group = [], []
    for k, (tokens, output) in enumerate(zip(sequences, outputs, strict=True)):
        mask = None
        if masks and draw(st.integers(0, 3)):
            mask = draw(st.lists(st.integers(0, 1), min_size=len(tokens), max_size=len(tokens)))
        group.append(Request(tokens=tokens, output=output, loss_mask=mask))
        if breaks[k] or k == len(sequences) - 1:
            items.append(Item(id=f"i{len(items)}", requests=tuple(group)))
            group = []
    return Workload(items=tuple(items))


@cache
def _card():
    return load_model("qwen3-8b")


def build_problem(workload: Workload, *, cp: int, chunk_tokens: int) -> Problem:
    """A roomy problem (80 GiB per rank) with small chunks, so tiny waves still spread over ranks; ``cp``
    is capped at the workload's distinct tokens (the planner refuses ranks that could own nothing)."""
    distinct = int(PrefixTree([r.tokens for _, _, r in workload.requests()]).node_length.sum())
    cp = min(cp, distinct)
    problem = Problem.build(
        workload, Settings(topology=Topology(cp=cp), model=_card(), memory_bytes=80 * 2**30)
    )
    return dataclasses.replace(problem, chunk_tokens=chunk_tokens)


def hand_plan(problem: Problem, *, layout: str, num_waves: int, owner_seed: int | None) -> Plan:
    """Items split into ``num_waves`` consecutive waves under ``layout``; chunk owners drawn at random
    from ``owner_seed`` (any pattern, ranks may own nothing), or the planner's contiguous split."""
    bounds = np.linspace(0, problem.num_items, min(num_waves, problem.num_items) + 1).astype(int)
    rng = np.random.default_rng(owner_seed)
    waves = []
    for lo, hi in itertools.pairwise(bounds):
        items = list(range(lo, hi))
        packed = problem.pack(items, layout)
        owner = None
        if owner_seed is not None:
            num_chunks = -(-packed.packed_tokens // problem.chunk_tokens)
            owner = rng.integers(0, problem.topology.cp, num_chunks)
        waves.append(price_wave(problem, items, packed, layout, owner))
    return Plan(strategy="test", waves=tuple(waves))
