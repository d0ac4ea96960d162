"""cpplan's prepare_micro_batches against the installed verl's: the same TensorDicts in, the same kind
of answer out, verl's contract kept (every sample once, the token cap, equal counts over DP ranks,
outputs restored to batch order by verl's own postprocess_batch_func)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="the verl extra is not installed")
pytest.importorskip("tensordict", reason="the verl extra is not installed")

from verl.utils import tensordict_utils as tu
from verl.workers.engine import utils as verl_utils

import cpplan
from cpplan.integrations import verl as cpplan_verl

CAP = 2048


@pytest.fixture(autouse=True)
def planner():
    """cpplan configured for Qwen3.6-35B-A3B with 7 GiB per GPU (about 3,300 tokens a micro-batch)."""
    yield cpplan_verl.configure(card="qwen3.6-35b-a3b", memory_bytes="7GiB")
    cpplan_verl.micro_batches._Configured.planner = None


def verl_batch(seed: int, num_samples: int = 24, **non_tensor) -> object:
    """A batch as verl's NO_PADDING mode holds it: jagged input_ids, position_ids and loss_mask (1 on
    the response), the cu_seqlens being the nested offsets; dynamic batch size with a 2,048-token cap."""
    rng = np.random.default_rng(seed)
    ids, positions, masks = [], [], []
    for _ in range(num_samples):
        prompt, response = int(rng.integers(20, 200)), int(rng.integers(10, 300))
        ids.append(torch.tensor(rng.integers(0, 1000, prompt + response)))
        positions.append(torch.arange(prompt + response))
        masks.append(
            torch.cat([torch.zeros(prompt, dtype=torch.long), torch.ones(response, dtype=torch.long)])
        )
    nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # noqa: E731
    settings = {"use_dynamic_bsz": True, "max_token_len_per_gpu": CAP, "sp_size": 1} | non_tensor
    return tu.get_tensordict(
        {"input_ids": nested(ids), "position_ids": nested(positions), "loss_mask": nested(masks)}, settings
    )


def lengths(data) -> list[int]:
    return data["input_ids"].offsets().diff().tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_sample_once_under_the_cap_and_restored(seed):
    """Both verl's and cpplan's answers hold every sample exactly once; cpplan's micro-batches are the
    TensorDicts of their indices, within max_token_len_per_gpu * sp_size, unshared waves of its plan;
    verl's postprocess_batch_func puts per-sample outputs back in batch order."""
    data = verl_batch(seed)
    _, their_idx = verl_utils.prepare_micro_batches(data)
    ours, idx = cpplan_verl.prepare_micro_batches(data)
    n = len(data)
    assert sorted(i for part in their_idx for i in part) == list(range(n))
    assert sorted(i for part in idx for i in part) == list(range(n))
    sizes = lengths(data)
    assert all(sum(sizes[i] for i in part) <= CAP for part in idx)
    for mb, part in zip(ours, idx, strict=True):
        assert [t.tolist() for t in mb["input_ids"].unbind()] == [data["input_ids"][i].tolist() for i in part]
    outputs = [{"model_output": {"log_probs": mb["input_ids"].to(torch.float64)}} for mb in ours]
    restored = verl_utils.postprocess_batch_func(outputs, idx, data)["model_output"]["log_probs"]
    assert [t.tolist() for t in restored.unbind()] == [
        t.double().tolist() for t in data["input_ids"].unbind()
    ]
    assert len(ours) >= -(-sum(sizes) // CAP)


def test_the_plan_decides_not_verls_balancer():
    """With a cap that never binds, the micro-batches are the cpplan plan's waves (same samples)."""
    data = verl_batch(3, max_token_len_per_gpu=10**6)
    _, idx = cpplan_verl.prepare_micro_batches(data)
    workload, _ = cpplan_verl.micro_batches.sample_workload(data, 1)
    waves = cpplan_verl.configure(card="qwen3.6-35b-a3b", memory_bytes="7GiB").plan(workload).plan.waves
    assert len(waves) > 1 and idx == [list(w.items) for w in waves]
    assert all(w.layout_name == "none" for w in waves)


def test_forced_groups_stay_together_and_counts_follow_verl():
    """force_group_size keeps consecutive samples together; min_num_micro_batch and
    num_batches_divided_by set the count as in verl (at least the minimum, then a multiple)."""
    data = verl_batch(4, force_group_size=4)
    _, idx = cpplan_verl.prepare_micro_batches(data, min_num_micro_batch=5, num_batches_divided_by=3)
    assert len(idx) == 6
    for part in idx:
        assert len(part) % 4 == 0
        assert all(part[k : k + 4] == list(range(part[k], part[k] + 4)) for k in range(0, len(part), 4))
        assert part[0] % 4 == 0


def test_without_dynamic_bsz_verls_fixed_path_runs():
    """use_dynamic_bsz False: verl's fixed micro-batch size, no indices (postprocess does not reorder)."""
    data = verl_batch(5, use_dynamic_bsz=False, micro_batch_size_per_gpu=6)
    batches, idx = cpplan_verl.prepare_micro_batches(data)
    assert idx is None and [len(b) for b in batches] == [6, 6, 6, 6]


def test_unconfigured_and_shared_planners_are_refused():
    """No configure(): an InputError naming the call; a planner that shares prefixes: refused."""
    cpplan_verl.micro_batches._Configured.planner = None
    with pytest.raises(cpplan.InputError, match="configure"):
        cpplan_verl.prepare_micro_batches(verl_batch(6))
    shared = cpplan.Planner(model="qwen3.6-35b-a3b", memory_bytes="7GiB", solver="deterministic")
    cpplan_verl.configure(shared)
    rng = np.random.default_rng(0)
    prompt = torch.tensor(rng.integers(0, 1000, 400))
    rows = [torch.cat([prompt, torch.tensor(rng.integers(0, 1000, 30))]) for _ in range(4)]
    data = tu.get_tensordict(
        {"input_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged)},
        {"use_dynamic_bsz": True, "max_token_len_per_gpu": CAP},
    )
    with pytest.raises(cpplan.InputError, match="unshared"):
        cpplan_verl.prepare_micro_batches(data)


def _dp_worker(rank: int, port: int, out) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    cpplan_verl.configure(card="qwen3.6-35b-a3b", memory_bytes="7GiB")
    data = verl_batch(10 + rank, num_samples=8 if rank == 0 else 30)
    _, idx = cpplan_verl.prepare_micro_batches(data, dp_group=dist.group.WORLD)
    out.put((rank, len(idx), sorted(i for p in idx for i in p) == list(range(len(data)))))
    dist.destroy_process_group()


@pytest.mark.slow
def test_dp_ranks_get_equal_counts():
    """Two gloo DP ranks with batches of very different sizes agree on one micro-batch count (verl's
    requirement), each still holding every one of its samples once."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_dp_worker, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results[0][1] == results[1][1] > 1 and all(ok for *_, ok in results)
