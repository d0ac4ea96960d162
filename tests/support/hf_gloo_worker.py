"""The worker of tests/test_hf_gloo.py: one process per CP rank over gloo on 127.0.0.1.

Each rank builds the same tiny model (from a saved state dict), plans the same workload with the
deterministic profile, runs :func:`cpplan.hf.packed_logprobs` with ``distributed=True`` for the
planned ownership and for zigzag chunks (each with the GDN states passed in rounds, in
parallel, and head-parallel), backpropagates the same loss as every other rank, sums the parameter
gradients over the group, and saves what it got for the test to compare. A third run
plans the workload with completion-only loss masks and backpropagates its masked policy loss
(:func:`masked_loss`).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from tests.support.hf_spawn import init_gloo

TIMEOUT_S = 60
MODES = ("parallel", "head_parallel")
"""The GDN modes run beside the rounds (parallel state passing; head-parallel, two all-to-alls)."""


def run(rank: int, world: int, port: int, folder: str) -> None:
    """Entry point for ``torch.multiprocessing.start_processes``."""
    from cpplan.hf import float64_internals, packed_logprobs, sum_gradients
    from tests.support.hf_models import (
        mixed_workload,
        plan,
        tiny_model,
        weighted_sum,
        with_gdn_handoff,
        zigzag,
    )

    init_gloo(rank, world, port, TIMEOUT_S)
    try:
        model = tiny_model("qwen3_5_moe")
        model.load_state_dict(torch.load(Path(folder) / "model.pt"))
        workload = mixed_workload(0)
        planned = plan(workload, world)
        record = {}
        runs = {"planned": planned, "zigzag": zigzag(planned, world)}
        runs.update(
            {f"{k}_{mode}": with_gdn_handoff(v, mode) for k, v in list(runs.items()) for mode in MODES}
        )
        for name, result in runs.items():
            model.zero_grad()
            with float64_internals():
                logprobs = packed_logprobs(model, result, workload, wave=0, distributed=True)
                weighted_sum(logprobs).backward()
            sum_gradients(model)
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            record[name] = {"logprobs": {k: v.detach() for k, v in logprobs.items()}, "grads": grads}
        record["masked"] = _masked_run(model)
        torch.save(record, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def masked_loss(logprobs: dict, workload) -> torch.Tensor:
    """GRPO's surrogate under the workload's own loss masks: a per-request advantage, sequence mean of
    token means."""
    from cpplan.hf import policy_loss

    advantages = {k: 0.5 - 0.25 * j for j, k in enumerate(sorted(logprobs))}
    return policy_loss(logprobs, advantages, reduction="sequence_mean_token_mean", workload=workload)


def _masked_run(model) -> dict:
    """The masked workload's planned wave on this rank: its loss and the group-summed gradients."""
    from cpplan.hf import float64_internals, packed_logprobs, sum_gradients
    from tests.support.hf_models import completion_masks, mixed_workload, plan, with_loss_masks

    workload = with_loss_masks(mixed_workload(0), completion_masks)
    model.zero_grad()
    with float64_internals():
        loss = masked_loss(
            packed_logprobs(model, plan(workload, dist.get_world_size()), workload, wave=0, distributed=True),
            workload,
        )
        loss.backward()
    sum_gradients(model)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {"loss": loss.detach(), "grads": grads}
