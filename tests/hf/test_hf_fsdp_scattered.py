"""cpplan.hf under FSDP2 in several gloo processes runs any chunk ownership exactly: ranks owning
scattered chunks (zigzag, interleaved, drawn at random, the proposers' balanced split free of ranges) and
ranks owning no chunk of a wave at all.

Two pools: a dp=2 x cp=2 mesh running the four waves of the step's pool plan (two per replica), and a 1x4
mesh running the step's one CP4 wave (GDN states handed over as priced, head-parallel, and in rounds and
in parallel). FSDP2 shards the tiny hybrid MoE model over the flattened mesh with sum reduction; every
rank runs its pool rank's waves and backpropagates the token-mean policy loss over the step's counted
tokens. The losses summed over the replicas are the unpacked single-process step's loss, and every
rank's full gradient its gradient (float64 internals: losses within 1e-12 relative, gradients within
1e-8 of each parameter's largest entry, as tests/hf/test_hf_fsdp.py).

A rank that owns no token of a wave still calls every module on its zero rows and joins every
collective; its loss share and gradient contribution are zero, under FSDP2 and under DDP (docs/hf.md,
"Any ownership, and a rank without tokens"). Those plans run in processes of their own, so that a hang
there fails only their tests.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil

import numpy as np
import pytest
import torch

import cpplan
from cpplan.api import build_problem
from cpplan.hf import float64_internals, unpacked_logprobs
from cpplan.plans.plan_writer import plan_to_dict
from cpplan.pricing.problem import Problem
from cpplan.pricing.wave import balanced_ownership, price_wave
from tests.hf import scattered_fsdp_worker as worker
from tests.support import hf_fsdp_worker
from tests.support.hf_models import (
    CARD,
    gradients,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    tiny_model,
    with_gdn_handoff,
)
from tests.support.hf_spawn import spawn_ranks

GRADS = 1e-8
MEMORY_BYTES = 80 * 2**30


def _zigzag(num_chunks: int, cp: int) -> np.ndarray:
    pattern = np.r_[np.arange(cp), np.arange(cp)[::-1]]
    return pattern[np.arange(num_chunks) % pattern.size]


def _owned(wave, owner: np.ndarray):
    return dataclasses.replace(wave, owner=np.asarray(owner).astype(wave.owner.dtype))


def pool_plans(workload: cpplan.Workload) -> dict[str, cpplan.Plan]:
    """The step's pool plan (dp=2 x cp=2: four waves, two per replica) with every wave's chunks in a
    zigzag, under the balanced split, or (``idle``) zigzag but wave 0 all on its rank 0 and wave 3 all
    on its rank 1, so that GPUs 1 and 0 own no token of one of their waves."""
    base = hf_fsdp_worker.step_plan(workload).plan
    group = build_problem(workload, topology=cpplan.Topology(cp=2), model=CARD, memory_bytes=MEMORY_BYTES)
    zigzag = [_zigzag(w.owner.size, 2) for w in base.waves]
    balanced = [balanced_ownership(group, w.stats) for w in base.waves]
    idle = [np.zeros(base.waves[0].owner.size), *zigzag[1:3], np.ones(base.waves[3].owner.size)]
    owners = {"zigzag": zigzag, "balanced": balanced, "idle": idle}
    return {name: _with_owners(base, found) for name, found in owners.items()}


def _with_owners(base: cpplan.Plan, owners: list[np.ndarray]) -> cpplan.Plan:
    waves = tuple(_owned(w, o) for w, o in zip(base.waves, owners, strict=True))
    return dataclasses.replace(base, waves=waves)


def cp4_plans(workload: cpplan.Workload) -> tuple[Problem, dict[str, cpplan.Plan]]:
    """The step's one CP4 wave re-priced (``price_wave``, which chooses the GDN hand-off) with chunks
    dealt round-robin (``interleaved``), drawn at random, under the balanced split, or (``idle``) dealt
    to ranks 1 and 2 only, so that ranks 0 and 3 own no token; and, beside the priced ones, ``random``
    and ``idle`` with their GDN states handed over in rounds and in parallel (``*_rounds``,
    ``*_parallel``)."""
    problem = build_problem(workload, topology=cpplan.Topology(cp=4), model=CARD, memory_bytes=MEMORY_BYTES)
    wave = plan(workload, 4).plan.waves[0]
    chunks = wave.owner.size
    owners = {
        "interleaved": np.arange(chunks) % 4,
        "random": np.random.default_rng(3).permutation(np.arange(chunks) % 4),
        "balanced": balanced_ownership(problem, wave.stats),
        "idle": 1 + np.arange(chunks) % 2,
    }
    plans = {
        name: cpplan.Plan(
            strategy=name,
            waves=(price_wave(problem, wave.items, wave.layout, wave.layout_name, owner=owner),),
        )
        for name, owner in owners.items()
    }
    for name, mode in itertools.product(("random", "idle"), ("rounds", "parallel")):
        plans[f"{name}_{mode}"] = with_gdn_handoff(plans[name], mode)
    return problem, plans


def _split_ranks(owner: np.ndarray) -> set[int]:
    """Ranks owning more than one run of consecutive chunks."""
    starts = owner[np.r_[True, owner[1:] != owner[:-1]]]
    return {int(r) for r in np.unique(starts) if (starts == r).sum() > 1}


def _idle_ranks(owner: np.ndarray, cp: int) -> set[int]:
    return set(range(cp)) - set(owner.tolist())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The model's state dict on disk (for the workers), the unpacked step's loss and its gradients."""
    folder = tmp_path_factory.mktemp("model")
    model = tiny_model("qwen3_5_moe").train()
    torch.save(model.state_dict(), folder / "model.pt")
    workload = mixed_workload(0)
    with float64_internals():
        logprobs = unpacked_logprobs(model, workload)
        loss = hf_fsdp_worker.step_loss(logprobs, workload, worker.step_denominator(workload))
        grads = gradients(model, loss)
    return folder / "model.pt", loss.detach(), grads


@pytest.fixture(scope="module")
def spawned(reference, tmp_path_factory):
    """Every rank's record of one job (``pool``: :func:`pool_plans` on the dp=2 x cp=2 mesh; ``cp4``:
    :func:`cp4_plans` on the 1x4 mesh; ``idle`` or not: the plans leaving a rank without tokens run in
    their own processes, under FSDP2 and DDP), each job run once for the module."""
    cache: dict[tuple[str, bool], tuple[dict, list[dict]]] = {}

    def get(job: str, idle: bool) -> tuple[dict, list[dict]]:
        if (job, idle) not in cache:
            dp, cp = (2, 2) if job == "pool" else (1, 4)
            found = pool_plans(mixed_workload(0)) if job == "pool" else cp4_plans(mixed_workload(0))[1]
            plans = {name: p for name, p in found.items() if name.startswith("idle") == idle}
            folder = tmp_path_factory.mktemp(f"{job}_idle" if idle else job)
            shutil.copy(reference[0], folder / "model.pt")
            wrappers = worker.WRAPPERS if idle else ("fsdp",)
            worker.write_job(folder, dp=dp, cp=cp, plans=plans, wrappers=wrappers)
            records = spawn_ranks(worker.run, dp * cp, folder, preload=["tests.hf.scattered_fsdp_worker"])
            cache[job, idle] = plans, records
        return cache[job, idle]

    return get


def _check(reference, run, name: str, replicas: list[int], wrapper: str = "fsdp") -> None:
    """Every rank ran its pool rank's waves; the replicas' losses sum to the unpacked loss; every rank's
    full gradient (each parameter's, none left without one) is the unpacked gradient."""
    _, want_loss, want_grads = reference
    plans, records = run
    key = (wrapper, name)
    for g, record in enumerate(records):
        assert record[key]["waves"] == [wave for wave, _ in cpplan.pool_waves(plans[name], g)]
    replica_losses = [sum(records[g][key]["losses"]) for g in replicas]
    torch.testing.assert_close(sum(replica_losses), want_loss, rtol=1e-12, atol=0)
    for record in records:
        grads = record[key]["grads"]
        assert grads.keys() == want_grads.keys()
        assert all(float(g.abs().max()) > 0 for g in grads.values())
        assert max_rel_grad_diff(grads, want_grads) <= GRADS


@pytest.mark.slow
@pytest.mark.parametrize("name", ["zigzag", "balanced"])
def test_fsdp2_pool_with_scattered_ownership_equals_unpacked(reference, spawned, name):
    """On a dp=2 x cp=2 gloo pool under FSDP2, the pool plan's waves with zigzag chunks or the balanced
    split: the replicas' losses sum to the unpacked step's loss and every rank's full gradient equals
    the unpacked gradient."""
    _check(reference, spawned("pool", idle=False), name, replicas=[0, 2])


@pytest.mark.slow
@pytest.mark.parametrize("wrapper", worker.WRAPPERS)
def test_pool_gpu_without_tokens_equals_unpacked(reference, spawned, wrapper):
    """On the dp=2 x cp=2 pool under FSDP2 and under DDP, with GPU 1 owning no token of wave 0 and GPU 0
    none of wave 3 (head-parallel waves: each still joins every collective and runs its heads): the
    losses sum to the unpacked step's loss and every rank's full gradient equals the unpacked gradient
    (no rank hangs: the run is bounded)."""
    _check(reference, spawned("pool", idle=True), "idle", [0, 2], wrapper)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["interleaved", "random", "balanced", "random_rounds", "random_parallel"])
def test_fsdp2_cp4_with_scattered_ownership_equals_unpacked(reference, spawned, name):
    """On a 1x4 gloo mesh under FSDP2, the CP4 wave with interleaved, random or balanced chunks (GDN
    states handed over as priced; random chunks also in rounds and in parallel): the loss is the
    unpacked step's loss and every rank's full gradient equals the unpacked gradient."""
    _check(reference, spawned("cp4", idle=False), name, replicas=[0])


@pytest.mark.slow
@pytest.mark.parametrize("wrapper", worker.WRAPPERS)
@pytest.mark.parametrize("name", ["idle", "idle_rounds", "idle_parallel"])
def test_cp4_ranks_without_tokens_equal_unpacked(reference, spawned, name, wrapper):
    """On the 1x4 mesh under FSDP2 and under DDP, the CP4 wave with ranks 0 and 3 owning no token (GDN
    states handed over as priced, head-parallel, where the idle ranks run heads of the others' tokens;
    in rounds; in parallel, where they run no recurrence): the loss is the unpacked step's loss and every
    rank's full gradient equals the unpacked gradient."""
    _check(reference, spawned("cp4", idle=True), name, [0], wrapper)


def test_plans_scatter_chunks_or_idle_a_rank_and_the_verifier_accepts_them():
    """The plans the gloo tests run are what they say: every scattered plan has a wave in which some
    rank owns separate runs of chunks, every ``idle`` plan a wave in which some rank owns no chunk; the
    CP4 plans (re-priced) pass the independent verifier, an idle rank included."""
    workload = mixed_workload(0)
    pools = pool_plans(workload)
    problem, singles = cp4_plans(workload)
    runs = [(name, found, 2) for name, found in pools.items()]
    for name, found, cp in [*runs, *((name, found, 4) for name, found in singles.items())]:
        idle = any(_idle_ranks(w.owner, cp) for w in found.waves)
        split = any(_split_ranks(w.owner) for w in found.waves)
        assert idle if name.startswith("idle") else split and not idle, name
    for name in ("interleaved", "random", "balanced", "idle"):
        verdict = cpplan.verify(
            plan_to_dict(problem, singles[name]),
            workload,
            topology=cpplan.Topology(cp=4),
            model=CARD,
            memory_bytes=MEMORY_BYTES,
        )
        assert verdict.valid, (name, verdict.violations)
