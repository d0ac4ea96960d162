"""The price of ART rows as ART runs them: every row of ``PackedTensors`` one wave, its shared prompt
copies once, its padding one more segment (ART computes the padded row, and log-probs at every
position), its tokens split over the CP ranks in even contiguous shards (ART hands a row to its trainer,
which shards it; cpplan's own ownership does not travel in ART's tensors). The same card prices ART's
rows and cpplan's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpplan.api import build_problem
from cpplan.baselines.base import build_plan
from cpplan.baselines.shard_rules import even_tokens
from cpplan.plans.plan import Plan
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Item, Request, Workload


@dataclass(frozen=True, kw_only=True)
class RowPrices:
    """Per row: the busiest rank's predicted peak (``peak_bytes``, safety included: what admission
    compares with the budget) and the predicted seconds (``row_s``); ``step_s`` is their sum."""

    peak_bytes: tuple[int, ...]
    row_s: tuple[float, ...]
    memory_bytes: int

    @property
    def step_s(self) -> float:
        """Predicted seconds of the step (every row once)."""
        return float(sum(self.row_s))

    @property
    def num_over_budget(self) -> int:
        """Rows whose busiest rank is over the budget."""
        return sum(peak > self.memory_bytes for peak in self.peak_bytes)

    @property
    def overshoot_bytes(self) -> int:
        """The most any row's busiest rank is over the budget (0 when every row fits)."""
        return max(0, max(self.peak_bytes) - self.memory_bytes)


def rows_workload(tensors: dict) -> Workload:
    """Each non-empty row of ART-convention ``tensors`` as one item: per own group (one result's tokens)
    a request of its prompt copy's positions then its own, and the row's padding as one more request;
    every position priced with its logits (ART's trainers compute the log-probs of every position of a
    row, padding included, whatever the assistant mask says). Token keys are the row's positions, fresh per
    row, so a row shares only its own prompt copies."""
    items, next_key = [], 0
    for row in range(tensors["tokens"].shape[0]):
        group = tensors["group_ids"][row].numpy()
        parent = tensors["parent_ids"][row].numpy()
        keys = np.arange(next_key, next_key + group.size, dtype=np.int64)
        next_key += group.size
        requests = []
        own = group != parent
        for g in dict.fromkeys(group[own].tolist()):
            mine = np.flatnonzero(group == g)
            chain = np.r_[np.flatnonzero(group == parent[mine[0]]), mine]
            requests.append(Request(tokens=keys[chain]))
        pad = np.flatnonzero(group == -1)
        if requests and pad.size:
            requests.append(Request(tokens=keys[pad]))
        if requests:
            items.append(Item(id=f"row{row}", requests=tuple(requests)))
    return Workload(items=tuple(items), token_ids=False)


def rows_plan(tensors: dict, settings: Settings) -> Plan:
    """ART's rows priced as one wave each under ``settings`` (card, topology, budget)."""
    workload = rows_workload(tensors)
    problem = build_problem(
        workload,
        topology=settings.topology,
        model=settings.model,
        memory_bytes=settings.memory_bytes,
        num_layers=settings.num_layers,
        phase=settings.phase,
    )
    waves = [[i] for i in range(len(workload.items))]
    return build_plan(problem, "art_rows", waves, layout="full", ownership=even_tokens)


def price_rows(tensors: dict, settings: Settings) -> RowPrices:
    """The :class:`RowPrices` of ART-convention ``tensors`` under ``settings``."""
    plan = rows_plan(tensors, settings)
    return RowPrices(
        peak_bytes=tuple(int(wave.prices.peak_bytes.max()) for wave in plan.waves),
        row_s=tuple(float(wave.cost_s) for wave in plan.waves),
        memory_bytes=settings.memory_bytes,
    )


__all__ = ["RowPrices", "price_rows", "rows_plan", "rows_workload"]
