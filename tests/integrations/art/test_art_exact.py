"""cpplan's ART packer against ART's own (openpipe-art, tested with 0.5.18): on the same tokenized
results, ART's ``loss_fn`` summed over the rows, and its gradients, on a tiny float64 Qwen3 with ART's
mask rule. Skipped without openpipe-art (the ``art`` extra); slow: importing ART takes about 10 s."""

from __future__ import annotations

import random

import pytest
import torch

from cpplan.integrations.art.art_import import art_version
from cpplan.integrations.art.art_pack import make_planner, pack_results_with_plan
from cpplan.integrations.art.art_synthetic import GroupShape, art_result_factory, group_results

from .art_model import QWEN3_SIZES, loss_and_grads, tiny_qwen3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        art_version() is None, reason="openpipe-art is not installed (pip install 'cpplan[art]')"
    ),
]

SEQ_LEN = 48
SHAPES = [
    GroupShape(num_trajectories=4, prompt_tokens=12, turn_tokens=(3, 8)),  # GRPO group
    GroupShape(num_trajectories=3, prompt_tokens=10, turn_tokens=(2, 5), num_turns=3, tool_tokens=(2, 4)),
    GroupShape(num_trajectories=2, prompt_tokens=60, turn_tokens=(3, 5)),  # prompt longer than seq_len
    GroupShape(num_trajectories=6, prompt_tokens=20, turn_tokens=(10, 15)),  # spans rows
    GroupShape(num_trajectories=1, prompt_tokens=30, turn_tokens=(25, 30)),  # one result over seq_len: cut
]
CASES = {
    "cp1 seven rows, plan": (296_700_000, None, "plan"),
    "cp1 two rows, plan": (297_000_000, None, "plan"),
    "cp1 one row, plan": (300_000_000, None, "plan"),
    "cp1 two rows, first fit": (297_000_000, None, "first_fit"),
    "cp2, cheaper": (296_700_000, "cp=2", "cheaper"),
}
"""Per case the memory per rank (the tiny card's static floor is about 296.4 MB), the topology and
where the rows come from (``rows_from``)."""


@pytest.fixture(scope="module")
def art():
    """ART's modules (transformers' mask helper restored after the import)."""
    from cpplan.integrations.art.art_import import import_art

    return import_art()


@pytest.fixture(scope="module")
def results(art):
    """ART tokenized results of the five groups of SHAPES."""
    return group_results(
        SHAPES,
        vocab_size=QWEN3_SIZES["vocab_size"],
        seed=3,
        make=art_result_factory(art.tokenize.TokenizedResult),
    )


@pytest.fixture(scope="module")
def model():
    """The tiny float64 Qwen3."""
    return tiny_qwen3()


def _packings(art, results, memory_bytes, topology=None, rows_from="cheaper"):
    """ART's tensors (seeded) and cpplan's packing of ``results``, under torch's current default dtype."""
    random.seed(0)
    theirs = art.pack.packed_tensors_from_tokenized_results(results, SEQ_LEN, pad_token_id=0)
    planner = make_planner(
        memory_bytes=memory_bytes, config=tiny_qwen3().config, dtype_bytes=8, topology=topology
    )
    ours = pack_results_with_plan(results, SEQ_LEN, planner=planner, pad_token_id=0, rows_from=rows_from)
    if rows_from != "cheaper":
        assert ours.strategy == rows_from
    return theirs, ours


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradients_equal_arts_in_float64(art, results, model, case):
    """With torch's default dtype float64 (so both packers normalize weights and advantages in
    float64), ART's summed loss and every gradient from cpplan's rows equal those from ART's rows to
    1e-12, whether cpplan's rows are the plan's waves (one, two or seven rows) or ART's first-fit at
    the floors' width, at CP1 or CP2."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        theirs, ours = _packings(art, results, *CASES[case])
    finally:
        torch.set_default_dtype(previous)
    assert ours.tensors["weights"].dtype == theirs["weights"].dtype == torch.float64
    loss_theirs, grads_theirs = loss_and_grads(model, theirs, art.loss.loss_fn)
    loss_ours, grads_ours = loss_and_grads(model, ours.tensors, art.loss.loss_fn)
    assert loss_theirs != 0.0
    assert loss_ours == pytest.approx(loss_theirs, rel=1e-12, abs=1e-14)
    for name, grad in grads_theirs.items():
        torch.testing.assert_close(grads_ours[name], grad, rtol=1e-10, atol=1e-13)


def test_loss_equals_arts_in_float32_up_to_normalization_order(art, results, model):
    """Under torch's float32 default (ART's own), ART normalizes weights and advantages in float32 over
    the packed batch, so the sums depend on row order: cpplan's loss and gradients equal ART's to
    float32 rounding (1e-6)."""
    theirs, ours = _packings(art, results, *CASES["cp1 two rows, plan"])
    assert ours.tensors["advantages"].dtype == theirs["advantages"].dtype == torch.float32
    loss_theirs, grads_theirs = loss_and_grads(model, theirs, art.loss.loss_fn)
    loss_ours, grads_ours = loss_and_grads(model, ours.tensors, art.loss.loss_fn)
    assert loss_ours == pytest.approx(loss_theirs, rel=1e-6)
    for name, grad in grads_theirs.items():
        torch.testing.assert_close(grads_ours[name], grad, rtol=1e-5, atol=1e-6 * float(grad.abs().max()))


def test_cpplan_rows_are_fewer_and_share_the_prompt(art, results):
    """The cases hold what the comparison claims: ART spans a group over rows and writes its prompt
    again in each; cpplan packs the step into fewer padded tokens, and its rows write each prompt once
    where a group is in one row."""
    theirs, ours = _packings(art, results, *CASES["cp1 two rows, plan"])
    assert ours.result.plan.num_waves == 2
    assert ours.padded_tokens < theirs["tokens"].numel()
    group = results[9].prompt_id  # the 6-result group of 20-token prompts
    art_prompt_copies = sum(int((row == group).sum()) // 19 for row in theirs["group_ids"])
    ours_prompt_copies = sum(int((row == group).sum()) // 19 for row in ours.tensors["group_ids"])
    assert art_prompt_copies >= 2 and ours_prompt_copies == 1


@pytest.mark.parametrize(
    "options", [{"advantage_balance": 0.5}, {"advantage_balance": -0.5}, {"pack_results": False}]
)
def test_arts_other_options_give_arts_loss(art, results, model, options):
    """ART's ``advantage_balance`` (either sign) and ``pack_results=False`` (one result a row) passed to
    both packers: the summed loss and its gradients agree to 1e-12 (float64 default dtype)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        random.seed(0)
        theirs = art.pack.packed_tensors_from_tokenized_results(results, SEQ_LEN, pad_token_id=0, **options)
        planner = make_planner(
            memory_bytes=CASES["cp1 two rows, plan"][0], config=tiny_qwen3().config, dtype_bytes=8
        )
        ours = pack_results_with_plan(results, SEQ_LEN, planner=planner, pad_token_id=0, **options)
    finally:
        torch.set_default_dtype(previous)
    if options.get("pack_results") is False:
        assert ours.strategy == "unpacked" and all(len(members) == 1 for members in ours.row_results)
    loss_theirs, grads_theirs = loss_and_grads(model, theirs, art.loss.loss_fn)
    loss_ours, grads_ours = loss_and_grads(model, ours.tensors, art.loss.loss_fn)
    assert loss_ours == pytest.approx(loss_theirs, rel=1e-12, abs=1e-14)
    for name, grad in grads_theirs.items():
        torch.testing.assert_close(grads_ours[name], grad, rtol=1e-10, atol=1e-13)
