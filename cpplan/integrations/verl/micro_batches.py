"""verl's ``prepare_micro_batches`` (``verl/workers/engine/utils.py``, verl 0.9) with cpplan choosing
the micro-batches: same signature, same return (the micro-batch TensorDicts and the sample indices
of each, which verl's ``postprocess_batch_func`` uses to restore the batch order).

verl's engines run each micro-batch padding-free without sharing prefixes, so cpplan plans with the
unshared layout only (:func:`flat_profile`) and prices each micro-batch's memory and time on the
card. verl's own contract stays: with ``use_dynamic_bsz`` no micro-batch holds more than
``max_token_len_per_gpu * sp_size`` tokens, ``force_group_size`` consecutive samples stay together,
and every DP rank gets as many micro-batches (the count is all-reduced over ``dp_group``); a planned
wave that breaks the cap, or a count below the agreed one, is met by splitting the largest micro-batch
(a part of a wave that fits still fits). Without ``use_dynamic_bsz`` verl's fixed-size path runs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from verl.utils import tensordict_utils as tu
from verl.workers.engine import utils as verl_utils

from cpplan.errors import InputError
from cpplan.planner import Planner
from cpplan.spec.profile import SolverProfile, load_solver
from cpplan.spec.workload import Item, Request, Workload


class _Configured:
    """The planner :func:`configure` set (one slot, replaced on every call)."""

    planner: Planner | None = None


def flat_profile(solver: str = "deterministic") -> SolverProfile:
    """``solver`` restricted to the greedy planner on the unshared layout (what verl executes)."""
    profile = load_solver(solver)
    greedy = profile.greedy.model_copy(update={"layouts": ("none",)})
    return profile.model_copy(update={"strategies": ("greedy",), "greedy": greedy})


def configure(
    planner: Planner | None = None,
    *,
    card: str | None = None,
    memory_bytes: int | str | None = None,
    topology=None,
    solver: str = "deterministic",
) -> Planner:
    """Set the planner :func:`prepare_micro_batches` uses: a ready one (its profile must plan the
    ``none`` layout only, e.g. :func:`flat_profile`), or one made from ``card`` and ``memory_bytes``
    (per GPU, for one micro-batch) with ``flat_profile(solver)``; ``deterministic`` by default, so
    every DP rank plans alike."""
    if planner is None:
        if card is None or memory_bytes is None:
            raise ValueError("give a cpplan planner, or card and memory_bytes")
        planner = Planner(
            model=card, topology=topology, memory_bytes=memory_bytes, solver=flat_profile(solver)
        )
    _Configured.planner = planner
    return planner


def prepare_micro_batches(
    data,
    dp_group=None,
    num_batches_divided_by=None,
    same_micro_num_in_dp=True,
    min_num_micro_batch=None,
    use_dynamic_bsz_balance=True,
):
    """verl's ``prepare_micro_batches`` planned by cpplan: ``(micro_batches, batch_idx_list)``.
    ``use_dynamic_bsz_balance`` is accepted for the signature (cpplan's plan sets the order)."""
    if not tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True):
        return verl_utils.prepare_micro_batches(
            data, dp_group, num_batches_divided_by, same_micro_num_in_dp, min_num_micro_batch
        )
    planner = _Configured.planner
    if planner is None:
        raise InputError("call cpplan.integrations.verl.configure(...) first", field="planner")
    group_size = tu.get_non_tensor_data(data=data, key="force_group_size", default=1)
    cap = int(data["max_token_len_per_gpu"]) * tu.get_non_tensor_data(data=data, key="sp_size", default=1)
    workload, lengths = sample_workload(data, group_size)
    parts = split_to_fit(planned_groups(planner, workload), lengths, cap, 0)
    agreed = _agreed_count(
        len(parts), dp_group, same_micro_num_in_dp, num_batches_divided_by, min_num_micro_batch
    )
    parts = split_to_fit(parts, lengths, cap, agreed)
    samples = [[g * group_size + k for g in part for k in range(group_size)] for part in parts]
    return [tu.index_select_tensor_dict(data, idx) for idx in samples], samples


def sample_workload(data, group_size: int) -> tuple[Workload, list[int]]:
    """One cpplan item per ``group_size`` consecutive samples (their tokens and ``loss_mask``), and
    each item's token count."""
    ids = _rows(data["input_ids"], data)
    masks = _rows(data["loss_mask"], data) if "loss_mask" in data else [None] * len(ids)
    if len(ids) % group_size:
        raise ValueError(f"batch size {len(ids)} is not a multiple of force_group_size {group_size}")
    items, lengths = [], []
    for g in range(len(ids) // group_size):
        members = range(g * group_size, (g + 1) * group_size)
        requests = tuple(Request(tokens=ids[i], loss_mask=masks[i]) for i in members)
        items.append(Item(id=f"s{g}", requests=requests))
        lengths.append(sum(len(ids[i]) for i in members))
    return Workload(items=tuple(items)), lengths


def _rows(tensor: torch.Tensor, data) -> list[list[int]]:
    """Each sample's values: a jagged nested tensor's rows, or a padded tensor's attended entries."""
    if tensor.is_nested:
        return [row.tolist() for row in tensor.unbind()]
    attended = data["attention_mask"].bool()
    return [row[m].tolist() for row, m in zip(tensor, attended, strict=True)]


def planned_groups(planner: Planner, workload: Workload) -> list[list[int]]:
    """The plan's waves as lists of item indices (each wave unshared, as verl will run it)."""
    plan = planner.plan(workload).plan
    shared = sorted({w.layout_name for w in plan.waves} - {"none"})
    if shared:
        raise InputError(
            f"the planner chose shared layouts {shared}; verl runs micro-batches unshared: "
            "make it with solver=cpplan.integrations.verl.flat_profile()",
            field="planner",
        )
    return [list(w.items) for w in plan.waves]


def _agreed_count(count: int, dp_group, same: bool, divided_by: int | None, minimum: int | None) -> int:
    """verl's micro-batch count rules: at least ``minimum``, the largest over the DP group, rounded up
    to a multiple of ``divided_by``."""
    count = max(count, minimum or 0)
    if same and dp_group is not None and dist.is_initialized():
        agreed = torch.tensor([count])
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=dp_group)
        count = int(agreed.item())
    return -(-count // divided_by) * divided_by if divided_by else count


def split_to_fit(waves: list[list[int]], lengths: list[int], cap: int, count: int) -> list[list[int]]:
    """The waves, the largest split in two (at its token midpoint, items kept in order) while one holds
    more than ``cap`` tokens or there are fewer than ``count``."""
    too_long = [i for i, n in enumerate(lengths) if n > cap]
    if too_long:
        raise ValueError(f"sample group {too_long[0]} has {lengths[too_long[0]]} tokens, over {cap}")
    parts = [list(w) for w in waves]

    def size(part: list[int]) -> int:
        return sum(lengths[i] for i in part)

    while len(parts) < count or any(size(p) > cap for p in parts):
        splittable = [p for p in parts if len(p) > 1]
        if not splittable:
            raise ValueError(f"cannot make {count} non-empty micro-batches from {len(lengths)} sample groups")
        largest = max(splittable, key=size)
        running = torch.tensor([lengths[i] for i in largest]).cumsum(0)
        cut = min(max(int((running < running[-1] / 2).sum()), 1), len(largest) - 1)
        at = parts.index(largest)
        parts[at : at + 1] = [largest[:cut], largest[cut:]]
    return parts


__all__ = ["configure", "flat_profile", "prepare_micro_batches", "sample_workload", "split_to_fit"]
