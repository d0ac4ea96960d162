"""cpplan.hf runs planned waves on transformers models exactly: packed, CP-sharded log-probs and
parameter gradients equal each request run alone through the unmodified model.

Everything runs in float64 inside :func:`cpplan.hf.float64_internals` (transformers upcasts to float32
inside its norms and GDN kernel; see tests ``test_as_shipped_*``). Tolerances: log-probs within 1e-9
absolute, every parameter's gradient within 1e-8 of its largest entry (observed: ~1e-15 and ~1e-12).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import cpplan
import cpplan.hf.gdn as gdn_module
from cpplan.hf import float64_internals, packed_logprobs, unpacked_logprobs
from cpplan.hf.geometry import WaveGeometry
from tests.conftest import without_head_parallel
from tests.support.hf_models import (
    CARD,
    gradients,
    max_abs_diff,
    max_rel_grad_diff,
    mixed_workload,
    one_thread,  # noqa: F401 (autouse fixture)
    plan,
    random_tree_workload,
    tiny_model,
    weighted_sum,
    with_gdn_handoff,
    zigzag,
)

LOGPROBS = 1e-9
GRADS = 1e-8


@pytest.fixture(scope="module")
def workload() -> cpplan.Workload:
    """GRPO groups, a multi-turn prefix chain with a duplicate, and a lone request (~2.6K packed)."""
    return mixed_workload(0)


@pytest.fixture(scope="module")
def references(workload):
    """Per family: the model and its unpacked log-probs and gradients (computed once)."""
    cache = {}

    def get(family: str):
        if family not in cache:
            model = tiny_model(family)
            with float64_internals():
                logprobs = unpacked_logprobs(model, workload)
                grads = gradients(model, weighted_sum(logprobs))
            cache[family] = (model, logprobs, grads)
        return cache[family]

    return get


def _run(model, result, workload, **kwargs):
    with float64_internals():
        logprobs = packed_logprobs(model, result, workload, wave=0, **kwargs)
        return logprobs, gradients(model, weighted_sum(logprobs))


def _ownership(workload, cp: int, kind: str):
    result = plan(workload, cp)
    return result if kind == "planned" else zigzag(result, cp)


CASES = [
    ("qwen3_5_moe", 1, "planned"),
    ("qwen3_5_moe", 2, "planned"),
    ("qwen3_5_moe", 4, "planned"),
    ("qwen3_5_moe", 2, "zigzag"),
    ("qwen3_5_moe", 4, "zigzag"),
    ("qwen3_5", 4, "zigzag"),
    ("qwen3_moe", 2, "zigzag"),
    ("qwen3", 4, "planned"),
]


@pytest.mark.parametrize(("family", "cp", "ownership"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_packed_equals_unpacked(references, workload, family, cp, ownership):
    """For GRPO groups, a prefix chain and a lone request planned at CP ``cp`` (the planner's ranges,
    or 128-token chunks dealt in a zigzag), every request's packed log-probs and every parameter
    gradient of a weighted sum of them equal the unpacked run; at CP > 1 segments really are cut
    between ranks (and, zigzag, a rank owns several pieces of one segment)."""
    model, want, want_grads = references(family)
    result = _ownership(workload, cp, ownership)
    geo = WaveGeometry.build(cpplan.materialize_wave(result, workload, wave=0))
    pieces = geo.pieces
    if cp > 1:
        cut = (pieces.pred >= 0) & (pieces.segment == pieces.segment[np.maximum(pieces.pred, 0)])
        assert (cut & (pieces.owner != pieces.owner[np.maximum(pieces.pred, 0)])).any()
    logprobs, grads = _run(model, result, workload)
    assert {k: v.numel() for k, v in logprobs.items()} == {k: v.numel() for k, v in want.items()}
    assert max_abs_diff(logprobs, want) <= LOGPROBS
    assert max_rel_grad_diff(grads, want_grads) <= GRADS


@pytest.mark.parametrize(("seed", "cp"), [(1, 2), (2, 4), (3, 4)])
def test_random_prefix_trees(seed, cp):
    """Random prefix trees (requests branching off earlier ones at random cuts, some a prefix of or
    equal to another) planned at CP ``cp`` with zigzag chunks: packed equals unpacked on the hybrid
    MoE model (log-probs and gradients)."""
    workload = random_tree_workload(seed)
    model = tiny_model("qwen3_5_moe", seed=seed)
    with float64_internals():
        want = unpacked_logprobs(model, workload)
        want_grads = gradients(model, weighted_sum(want))
    logprobs, grads = _run(model, zigzag(plan(workload, cp), cp), workload)
    assert max_abs_diff(logprobs, want) <= LOGPROBS
    assert max_rel_grad_diff(grads, want_grads) <= GRADS


def _zero_states(which: str):
    real = gdn_module.initial_states

    def faulty(step, geo, finals, zero):
        states = real(step, geo, finals, zero)
        pieces = geo.pieces
        pred = pieces.pred[step]
        at_segment_start = geo.seg_offset[pieces.segment[step]] == pieces.start[step]
        wrong = (pred >= 0) & (at_segment_start if which == "branch" else ~at_segment_start)
        return states * torch.as_tensor(~wrong, dtype=states.dtype)[:, None, None, None]

    return faulty


def _zero_conv_tails(which: str):
    real = gdn_module.conv_sources

    def faulty(geo, taps):
        published, sources = real(geo, taps)
        history = geo.history(taps)
        for r, src in sources.items():
            mine = history[geo.owned(r)]
            seen = np.maximum(mine, 0)
            if which == "branch":
                wrong = (mine >= 0) & (geo.segment[seen] != geo.segment[geo.owned(r)][:, None])
            else:
                wrong = (
                    (mine >= 0) & (geo.owner[seen] != r) & (geo.segment[seen] == geo.segment[mine[:, -1:]])
                )
            src[wrong] = 0
        return published, sources

    return faulty


_PIECE_KEYS = WaveGeometry.piece_keys


def _own_segment_keys(self, rank, piece):
    keys = _PIECE_KEYS(self, rank, piece)
    return keys[self.segment[keys] == self.segment[keys[-1]]]


FAULTS = {
    "recurrent state at branch points": (gdn_module, "initial_states", _zero_states("branch")),
    "recurrent state across CP cuts": (gdn_module, "initial_states", _zero_states("cut")),
    "conv tail at branch points": (gdn_module, "conv_sources", _zero_conv_tails("branch")),
    "conv tail across CP cuts": (gdn_module, "conv_sources", _zero_conv_tails("cut")),
    "attention to ancestor segments": (WaveGeometry, "piece_keys", _own_segment_keys),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_wrong_hand_off_breaks_equality(references, workload, monkeypatch, fault):
    """Each hand-off is really exercised: zeroing a child segment's initial recurrent state (or a CP
    continuation's), its conv tail from the parent (or from the previous rank), or hiding ancestor
    keys from attention makes the packed log-probs differ from the unpacked ones by far more than the
    tolerance (CP 4, zigzag chunks)."""
    model, want, _ = references("qwen3_5_moe")
    owner, name, replacement = FAULTS[fault]
    monkeypatch.setattr(owner, name, replacement)
    with float64_internals(), torch.no_grad():
        logprobs = packed_logprobs(model, zigzag(plan(workload, 4), 4), workload, wave=0)
    assert max_abs_diff(logprobs, want) > 1e-4


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_lora_model_gradients(workload):
    """A PEFT LoRA-wrapped hybrid MoE model (random, non-zero adapters): packed log-probs and the LoRA
    parameters' gradients equal the unpacked run's."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=4, target_modules=["q_proj", "v_proj", "in_proj_qkv", "out_proj"], init_lora_weights=False
    )
    torch.manual_seed(7)
    model = get_peft_model(tiny_model("qwen3_5_moe"), config).double()
    with float64_internals():
        want = unpacked_logprobs(model, workload)
        want_grads = gradients(model, weighted_sum(want))
    logprobs, grads = _run(model, plan(workload, 2), workload)
    lora = {n: g for n, g in want_grads.items() if "lora_" in n}
    assert lora and all(float(g.abs().max()) > 0 for g in lora.values())
    assert max_abs_diff(logprobs, want) <= LOGPROBS
    assert max_rel_grad_diff({n: grads[n] for n in lora}, lora) <= GRADS


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5_moe"])
def test_as_shipped_within_float32(workload, family):
    """Without float64_internals transformers runs its norms, router and GDN kernel in float32: packed
    still equals unpacked to float32 precision (log-probs within 1e-6; gradients within 1e-2 of each
    parameter's largest entry: the GDN decay parameters' gradients accumulate in float32 inside the
    transformers kernel, to ~1e-3 relative). Attention-only models agree to 1e-12 in the forward."""
    model = tiny_model(family)
    want = unpacked_logprobs(model, workload)
    want_grads = gradients(model, weighted_sum(want))
    logprobs = packed_logprobs(model, plan(workload, 2), workload, wave=0)
    grads = gradients(model, weighted_sum(logprobs))
    assert max_abs_diff(logprobs, want) <= (1e-12 if family == "qwen3" else 1e-6)
    assert max_rel_grad_diff(grads, want_grads) <= 1e-2


class MysteryMixer(nn.Module):
    """A token mixer cpplan does not know."""

    def forward(self, hidden_states, **kwargs):
        return hidden_states, None


def test_unknown_mixer_is_refused(workload):
    """A model whose layer holds a token mixer class cpplan cannot route is refused with an
    InputError naming that class."""
    model = tiny_model("qwen3", layers=2)
    model.model.layers[1].self_attn = MysteryMixer()
    with pytest.raises(cpplan.InputError, match=r"layer 1: .*token mixer class .*MysteryMixer"):
        packed_logprobs(model, plan(workload, 1), workload, wave=0)


def test_unknown_model_is_refused(workload):
    """A model class outside the supported families is refused with an InputError naming it."""

    class Wrapper(nn.Module):
        """Not a transformers causal LM."""

    with pytest.raises(cpplan.InputError, match=r"cannot route model class .*Wrapper"):
        packed_logprobs(Wrapper(), plan(workload, 1), workload, wave=0)


@pytest.mark.parametrize("wave", [1, -1, True])
def test_bad_wave_index_is_refused(workload, wave):
    """A wave index outside the plan (or not an integer) is an InputError naming the field."""
    model = tiny_model("qwen3", layers=1)
    with pytest.raises(cpplan.InputError, match="field 'wave'"):
        packed_logprobs(model, plan(workload, 1), workload, wave=wave)


def test_plan_for_another_workload_is_refused(workload):
    """Running a plan with a workload it was not made for (different tokens) is an InputError."""
    other = mixed_workload(1)
    model = tiny_model("qwen3", layers=1)
    with pytest.raises(cpplan.InputError, match="is this the workload the plan was made for"):
        packed_logprobs(model, plan(workload, 2), other, wave=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (fla and flex_attention kernels)")
def test_cuda_kernels_match(workload):
    """On CUDA, the fla gated delta rule and flex_attention path (float32) gives the log-probs of the
    pure-torch path and of the unpacked run within float32 tolerance."""
    model = tiny_model("qwen3_5_moe").float().cuda()
    want = unpacked_logprobs(model, workload)
    result = zigzag(plan(workload, 2), 2)
    fast = packed_logprobs(model, result, workload, wave=0, kernels="auto")
    slow = packed_logprobs(model, result, workload, wave=0, kernels="torch")
    assert max_abs_diff(fast, slow) <= 1e-3
    assert max_abs_diff(fast, want) <= 1e-3


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_path_equals_torch_path(references, workload):
    """The flex_attention path (the rank's tree BlockMask, GQA and scale passed to flex_attention) gives
    the same log-probs as the per-segment torch attention and the unpacked run (CPU, forward only:
    torch has no CPU flex_attention backward), at CP 4 with zigzag chunks."""
    model, want, _ = references("qwen3_5_moe")
    result = zigzag(plan(workload, 4), 4)
    with float64_internals(), torch.no_grad():
        flex = packed_logprobs(model, result, workload, wave=0, kernels="flex")
    assert max_abs_diff(flex, want) <= LOGPROBS


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_no_mask_outlives_its_wave(workload):
    """The flex path's BlockMasks (and the wave's geometry holding the key paths) are built during the
    wave's forward and all freed once it returns: nothing the wave allocated stays reachable."""
    import gc

    from torch.nn.attention.flex_attention import BlockMask

    model = tiny_model("qwen3", layers=2)

    def alive() -> tuple[int, int]:
        gc.collect()
        objects = gc.get_objects()
        return (
            sum(isinstance(o, BlockMask) for o in objects),
            sum(isinstance(o, WaveGeometry) for o in objects),
        )

    before = alive()
    seen = []
    real = WaveGeometry.build.__func__

    def spy(cls, batches):
        seen.append(real(cls, batches))
        return seen[-1]

    with pytest.MonkeyPatch.context() as patch, torch.no_grad():
        patch.setattr(WaveGeometry, "build", classmethod(spy))
        packed_logprobs(model, zigzag(plan(workload, 2), 2), workload, wave=0, kernels="flex")
        geo = seen.pop()
        assert len(geo.keys) == 2  # the spy saw the wave's geometry
        del geo
    assert alive() == before


def test_unknown_kernels_are_refused(workload):
    """An unknown ``kernels`` choice is a ValueError listing the known ones."""
    with pytest.raises(ValueError, match="kernels must be one of"):
        packed_logprobs(tiny_model("qwen3", layers=1), plan(workload, 1), workload, wave=0, kernels="cuda")


def test_rank_owning_nothing():
    """A CP rank that owns no token (three 128-token chunks dealt over four ranks) still takes part,
    and the other ranks' packed log-probs and gradients equal the unpacked run, with the GDN states in
    rounds and head-parallel (the empty rank then runs its heads over the whole wave). The plan is the
    two-mode card's (full sharing: three chunks)."""
    workload = mixed_workload(2, scale=0.12)
    card = without_head_parallel(cpplan.load_model(CARD))
    result = zigzag(
        cpplan.plan(
            workload,
            topology=cpplan.Topology(cp=4),
            model=card,
            memory_bytes=80 * 2**30,
            solver=cpplan.load_solver("deterministic"),
        ),
        4,
    )
    batches = cpplan.materialize_wave(result, workload, wave=0)
    assert [b.num_tokens == 0 for b in batches] == [False, False, False, True]
    model = tiny_model("qwen3_5_moe")
    with float64_internals():
        want = unpacked_logprobs(model, workload)
        want_grads = gradients(model, weighted_sum(want))
    for mode in ("rounds", "head_parallel"):
        logprobs, grads = _run(model, with_gdn_handoff(result, mode), workload)
        assert max_abs_diff(logprobs, want) <= LOGPROBS
        assert max_rel_grad_diff(grads, want_grads) <= GRADS


def test_plan_file_and_plan_object(references, workload, tmp_path):
    """The plan may be given as the Plan object or as the plan JSON (a dictionary or a file path):
    all give the same log-probs as the PlanResult."""
    import json

    model, want, _ = references("qwen3_5_moe")
    result = plan(workload, 2)
    data = result.to_dict()
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with float64_internals(), torch.no_grad():
        for given in (result.plan, data, str(path)):
            assert max_abs_diff(packed_logprobs(model, given, workload, wave=0), want) <= LOGPROBS


def test_token_outside_vocabulary_is_refused():
    """A wave holding a token id the model cannot embed is an InputError naming the id and the
    vocabulary size."""
    workload = cpplan.Workload(items=(cpplan.Item(id="a", requests=(cpplan.Request(tokens=[1, 2, 99]),)),))
    with pytest.raises(cpplan.InputError, match="token id 99, outside the model's vocabulary of 64"):
        packed_logprobs(tiny_model("qwen3", layers=1), plan(workload, 1), workload, wave=0)
