"""A trainer's rows (a prompt and a completion each) as a cpplan workload: one item per distinct
prompt, holding the rows that share it, so the prompt is stored once in the wave's prefix tree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpplan.spec.workload import Item, Request, Workload

Key = tuple[str, int]


@dataclass(frozen=True, kw_only=True)
class RolloutRow:
    """One row: its prompt tokens and its completion tokens (``completion_mask`` 1 on every one)."""

    prompt: tuple[int, ...]
    completion: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("a row needs at least one prompt token (the first completion token's context)")


def grouped_workload(
    rows: Sequence[RolloutRow], *, keep_empty: bool = False
) -> tuple[Workload, list[Key | None]]:
    """The workload of ``rows`` and, per row, the ``(item id, request index)`` its log-probs come back
    under (``None`` for a row without completion tokens: nothing to score). Items are the distinct
    prompts in order of first appearance (ids ``p0``, ``p1``, ..); each request is prompt + completion
    with a loss mask of 1 on the completion tokens, so the planner prices logits only there. A row
    without completion tokens is left out, or, with ``keep_empty``, kept as its prompt alone (a loss
    mask of zeros: its tokens run, as the MoE router loss of the padded batch counts them)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, row in enumerate(rows):
        if row.completion or (keep_empty and row.prompt):
            groups.setdefault(row.prompt, []).append(index)
    keys: list[Key | None] = [None] * len(rows)
    items = []
    for number, (prompt, members) in enumerate(groups.items()):
        item_id = f"p{number}"
        requests = []
        for k, index in enumerate(members):
            completion = rows[index].completion
            mask = np.r_[np.zeros(len(prompt), np.int64), np.ones(len(completion), np.int64)]
            requests.append(Request(tokens=[*prompt, *completion], loss_mask=mask))
            keys[index] = (item_id, k) if completion else None
        items.append(Item(id=item_id, requests=tuple(requests)))
    return Workload(items=tuple(items)), keys


__all__ = ["Key", "RolloutRow", "grouped_workload"]
