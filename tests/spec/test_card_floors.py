"""Memory floors: reference rows, hand-computed term sizes, sharding, monotonicity, --layers, phases."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpplan
from cpplan import Topology, UnsupportedTopologyError, load_model
from cpplan.bench.synthetic import to_jsonl
from cpplan.calibration.measurements import predict, predict_row, read_measurements, unique_workload
from cpplan.cli import main
from cpplan.errors import InputError
from cpplan.pricing.evaluator import price
from cpplan.pricing.wave import price_wave
from cpplan.spec.card import available_models
from cpplan.spec.profile import load_solver
from cpplan.spec.quantities import QUANTITIES, QUANTITY_INDEX

DATA = Path(__file__).resolve().parents[1] / "data"
REFERENCE = DATA / "measurements.csv"
MODEL = "qwen3.6-35b-a3b"
CARDS = ("qwen3.6-35b-a3b", "qwen3.5-27b", "qwen3-30b-a3b", "qwen3-8b", "qwen3-14b")


def term_bytes(name: str, topology: Topology, *, layers: int | None = None, phase: str = "cold") -> dict:
    resolved = load_model(name).resolve(topology, num_layers=layers, phase=phase)
    return {t: float(b) for t, b in zip(resolved.term_names, resolved.term_bytes, strict=True)}


# ------------------------------------------------------------------------------------ reference rows


@pytest.mark.parametrize("row", read_measurements(REFERENCE), ids=lambda r: f"line{r.line}")
def test_reference_row_predicted_within_band(row):
    """Each reference row's predicted peak (peak_bytes, safety included, busiest rank) is at least its
    observed maximum and at most 1.15 times it."""
    wave = predict_row(load_model(row.model), row)
    ratio = wave.peak_bytes / row.observed_max_bytes
    assert 1.0 <= ratio <= 1.15, (row, wave.peak_bytes, ratio)


def test_reference_prediction_is_what_plan_reports():
    """The CP2 cold reference row, planned by ``cpplan.plan`` with a budget far above the peak, is one
    wave packed as the calibration packs it, whose ranks' peak_bytes under the measured ownership
    (contiguous near-even token shares) are exactly the prediction the calibration and the tests use
    (the planner may choose another ownership, priced by the same card)."""
    row = next(r for r in read_measurements(REFERENCE) if r.topology.cp == 2 and r.phase == "cold")
    expected = predict_row(load_model(MODEL), row)
    result = cpplan.plan(
        unique_workload(row.requests, row.total_tokens),
        topology=row.topology,
        model=MODEL,
        memory_bytes=10**15,
        num_layers=row.layers,
        phase=row.phase,
        solver=load_solver("deterministic").model_copy(update={"strategies": ("greedy",)}),
    )
    assert result.plan.num_waves == 1
    wave = result.plan.waves[0]
    assert wave.layout.seg_length.tolist() == expected.layout.seg_length.tolist()
    repriced = price_wave(result.problem, wave.items, wave.layout, wave.layout_name, owner=expected.owner)
    assert repriced.prices.peak_bytes.tolist() == expected.prices.peak_bytes.tolist()


def test_replaced_planner_failure_is_gone():
    """At CP2 a rank's predicted peak is within the measured 46-52 GB range's band (not the 5.27 GB of
    the generic activation-factor fallback, nor the 0.56-0.64 fraction of the replaced planner)."""
    wave = predict(
        load_model(MODEL),
        topology=Topology(cp=2),
        num_layers=8,
        phase="cold",
        num_requests=10,
        total_tokens=195_000,
    )
    assert (wave.prices.peak_bytes >= 46.0e9).all()
    assert wave.peak_bytes <= 1.15 * 51.9e9


# ------------------------------------------------------------------------ term sizes from geometry


def test_qwen36_terms_match_hand_computation():
    """Qwen3.6-35B-A3B at 8 layers (6 GDN + 2 attention, pattern gdn,gdn,gdn,attention), TP1 EP1:
    checkpointed 8 x 2048 x 2 = 32,768; routing 8 MoE layers x top-8 x 52 = 3,328; GDN pending per
    segment 6 x (32 x 128 x 128 x 4 + (2 x 16 + 32) x 128 x 3 x 2) = 6 x 2,146,304 = 12,877,824;
    MoE 8 x (3 x 512 + 5 x 2048) x 2 = 188,416; router 3 x 256 x 4 = 3,072; shared expert
    (3 x 512 + 2048) x 2 = 7,168; layer grads 2 x 2048 x 2 = 8,192; attention (8 x 16 + 2 x 2) x 256 x 2
    = 67,584 (66 KiB); GDN recompute (2 x 64 + 3 x 32) x 128 x 2 = 57,344; GDN chunk states
    32 x 128 x 128 x 4 / 64 = 32,768 (with recompute 90,112 = 88 KiB); GDN segment states
    3 x 32 x 128 x 128 x 4 = 6,291,456; head 2 x 2048 x 2 + 8 = 8,200. At CP2 add the merge buffers
    16 x 256 x 6 = 24,576 per local token (attention 96,256 = 94 KiB at CP2) and gathered k, v and grads
    4 x 2 x 256 x 2 = 4,096 per remote token. Held per layer until its backward (pattern g g g a g g g a):
    in the top attention layer (7) 8 layers' inputs and routing and 6 GDN layers' entry states, in the
    top GDN layer (6) 7 and 6, in the bottom attention layer (3) 4 and 3, in the bottom GDN layer (0) 1
    and 1. Static: 256 MiB plus one layer's fp32 LoRA r16 gradients, 4 x 16 x (256 x 3 x 2560 + 3 x 2560
    + max(4096 + 52 x 256, 4096 + 128 x 128)) = 127,631,360 B, for each layer at or above the one in
    backward (1, 2, 5 and 8 layers); none in the head, which runs before any layer's backward."""
    cp1 = term_bytes(MODEL, Topology(), layers=8, phase="warm")
    assert cp1 == {
        "checkpointed_inputs": 32_768,
        "routing_state": 3_328,
        "gdn_pending_state": 12_877_824,
        "moe_working_set": 188_416,
        "router": 3_072,
        "shared_expert": 7_168,
        "layer_grads": 8_192,
        "attention_recompute": 67_584,
        "gdn_recompute": 57_344,
        "gdn_chunk_states": 32_768,
        "gdn_segment_states": 6_291_456,
        "head": 8_200,
        "warm_residual": 0.0,
        **_held(("attn_top", 8, 6), ("gdn_top", 7, 6), ("attn_bottom", 4, 3), ("gdn_bottom", 1, 1)),
    }
    cp2 = term_bytes(MODEL, Topology(cp=2), layers=8, phase="warm")
    assert cp2["attention_cp_merge"] == 24_576
    assert cp2["attention_gathered_kv"] == 4_096
    resolved = load_model(MODEL).resolve(Topology(), num_layers=8)
    static = dict(zip(resolved.envelope_names, resolved.envelope_static_bytes.tolist(), strict=True))
    logits = 1024 * 248_320 * 10
    per_layer = 127_631_360
    assert static == {
        "attention_top": 2**28 + 1 * per_layer,
        "gdn_top": 2**28 + 2 * per_layer,
        "attention_bottom": 2**28 + 5 * per_layer,
        "gdn_bottom": 2**28 + 8 * per_layer,
        "head": 2**28 + logits,
    }


def _held(*positions: tuple[str, int, int]) -> dict[str, int]:
    """Held terms of the 8-layer 35B card at each (position, held layers, held GDN layers): 4,096 B of
    checkpointed input and 416 B of routing per token and layer, 2,146,304 B of GDN entry states per
    segment and GDN layer."""
    out = {}
    for position, layers, gdn in positions:
        out[f"checkpointed_inputs_{position}"] = layers * 4_096
        out[f"routing_state_{position}"] = layers * 416
        out[f"gdn_pending_state_{position}"] = gdn * 2_146_304
    return out


def test_other_cards_terms_match_hand_computation():
    """Qwen3-8B (36 layers, 4096 / 12288 / 32 heads, 8 KV x 128): checkpointed 36 x 4096 x 2 = 294,912;
    MLP (3 x 12288 + 2 x 4096) x 2 = 90,112; attention (6 x 32 + 4 x 8) x 128 x 2 = 57,344; head
    2 x 4096 x 2 + 8 = 16,392. Qwen3-14B (40 layers, 5120 / 17408 / 40, 8 x 128): checkpointed
    409,600; MLP (3 x 17408 + 2 x 5120) x 2 = 124,928; attention (6 x 40 + 32) x 256 = 69,632.
    Qwen3-30B-A3B (48 layers, 32 heads, 4 KV x 128, 128 experts top-8 FFN 768): MoE
    8 x (3 x 768 + 5 x 2048) x 2 = 200,704; router 3 x 128 x 4 = 1,536; routing 48 x 8 x 52 = 19,968;
    attention (6 x 32 + 4 x 4) x 256 = 53,248. Qwen3.5-27B (64 layers, 48 GDN with 48 value / 16 key
    heads x 128, 24 heads 4 KV x 256): GDN recompute (2 x 80 + 3 x 48) x 256 = 77,824; chunk states
    48 x 128^2 x 4 / 64 = 49,152; attention (8 x 24 + 2 x 4) x 512 = 102,400; GDN pending per segment
    48 x (48 x 128^2 x 4 + 80 x 128 x 3 x 2) = 153,944,064."""
    q8 = term_bytes("qwen3-8b", Topology())
    assert (q8["checkpointed_inputs"], q8["mlp_working_set"], q8["attention_recompute"], q8["head"]) == (
        294_912,
        90_112,
        57_344,
        16_392,
    )
    q14 = term_bytes("qwen3-14b", Topology())
    assert (q14["checkpointed_inputs"], q14["mlp_working_set"], q14["attention_recompute"]) == (
        409_600,
        124_928,
        69_632,
    )
    q30 = term_bytes("qwen3-30b-a3b", Topology())
    assert (q30["moe_working_set"], q30["router"], q30["routing_state"], q30["attention_recompute"]) == (
        200_704,
        1_536,
        19_968,
        53_248,
    )
    q27 = term_bytes("qwen3.5-27b", Topology())
    assert (q27["gdn_recompute"], q27["gdn_chunk_states"], q27["attention_recompute"]) == (
        77_824,
        49_152,
        102_400,
    )
    assert q27["gdn_pending_state"] == 153_944_064


def test_cold_excess_is_the_calibrated_fraction_of_the_layer_working_set():
    """Cold excess per token = cold_excess_ratio x (MoE 188,416 + router 3,072 + shared 7,168 +
    max(attention 67,584, GDN 57,344 + 32,768)) = ratio x 288,768 at CP1; warm pricing leaves it out."""
    card = load_model(MODEL)
    ratio = card.calibration.coefficients["cold_excess_ratio"]
    assert ratio > 0
    assert term_bytes(MODEL, Topology(), layers=8)["cold_excess"] == pytest.approx(ratio * 288_768)
    assert "cold_excess" not in term_bytes(MODEL, Topology(), layers=8, phase="warm")


# ----------------------------------------------------------------------------------------- sharding

SHARDED = {
    "cp2": Topology(cp=2),
    "cp4": Topology(cp=4),
    "tp2": Topology(tp=2),
    "tp4": Topology(tp=4),
    "ep2": Topology(ep=2, dp=2),
    "ep4": Topology(ep=4, cp=4),
    "etp2": Topology(etp=2, tp=2),
    "all": Topology(tp=2, cp=2, ep=2, etp=2),
}


@pytest.mark.parametrize("name", CARDS)
@pytest.mark.parametrize("key", list(SHARDED))
def test_no_floor_falls_to_zero_when_sharded(name, key):
    """Every term with bytes at TP1 CP1 EP1 still has positive bytes when cp, tp, ep or etp is above 1
    (sharding divides, it never switches a floor off), and every envelope keeps a positive per-token
    floor."""
    card = load_model(name)
    topology = SHARDED[key]
    if not _supported(card, topology):
        with pytest.raises(UnsupportedTopologyError):
            card.resolve(topology)
        return
    base = term_bytes(name, Topology())
    sharded = term_bytes(name, topology)
    for term, value in base.items():
        if value > 0:
            assert sharded.get(term, 0) > 0, (term, key)
    resolved = card.resolve(topology)
    per_token = resolved.envelope_coefficients()[:, QUANTITY_INDEX["tokens"]]
    assert (per_token > 0).all()


def _supported(card, topology) -> bool:
    try:
        card.check_supported(topology)
    except UnsupportedTopologyError:
        return False
    return True


def test_tp_ep_etp_shard_what_they_shard():
    """TP2 halves attention heads ((8 x 8 + 2 x 1) x 512 = 33,792) and GDN heads (112 x 256 = 28,672)
    but keeps the checkpointed inputs (32,768, replicated); at TP2 a rank holds one of the 2 KV heads
    (gathered at CP2: 4 x 1 x 256 x 2 = 2,048); EP2 prices the routed working set at the 1.5x skew
    (282,624) with the EP split map (8 x 8 x 56 = 3,584); ETP2 halves the expert FFN part
    (8 x (3 x 256 + 5 x 2048) x 2 = 176,128)."""
    tp2 = term_bytes(MODEL, Topology(tp=2), layers=8)
    assert (tp2["attention_recompute"], tp2["gdn_recompute"], tp2["checkpointed_inputs"]) == (
        33_792,
        28_672,
        32_768,
    )
    assert term_bytes(MODEL, Topology(tp=2, cp=2), layers=8)["attention_gathered_kv"] == 2_048
    ep2 = term_bytes(MODEL, Topology(ep=2, dp=2), layers=8)
    assert (ep2["moe_working_set"], ep2["routing_state"]) == (282_624, 3_584)
    assert term_bytes(MODEL, Topology(etp=2, tp=2), layers=8)["moe_working_set"] == 176_128


def test_pipeline_parallel_is_refused_clearly(tmp_path, capsys):
    """PP > 1 is refused with an error naming the topology field, from the API and from the CLI (exit
    2, no traceback), rather than priced as zero."""
    with pytest.raises(UnsupportedTopologyError, match="pp == 1"):
        load_model(MODEL).resolve(Topology(pp=2))
    workload = tmp_path / "w.jsonl"
    workload.write_text(to_jsonl(unique_workload(2, 1000)))
    code = main(["plan", str(workload), "--model", MODEL, "--topology", "pp=2", "--memory", "80GiB"])
    assert code == 2
    err = capsys.readouterr().err
    assert "topology" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------- monotonicity


@pytest.mark.parametrize("name", CARDS)
@settings(max_examples=30, deadline=None)
@given(
    base=st.lists(st.integers(0, 200_000), min_size=len(QUANTITIES), max_size=len(QUANTITIES)),
    more=st.lists(st.integers(0, 50_000), min_size=len(QUANTITIES), max_size=len(QUANTITIES)),
)
def test_peak_grows_with_local_quantities(name, base, more):
    """Raising any local quantity of a rank (tokens, segments, remote tokens, ...) never lowers its
    predicted peak, in either phase."""
    for phase in ("cold", "warm"):
        card = load_model(name).resolve(Topology(cp=2), phase=phase)
        low = np.array(base, dtype=float)
        high = low + np.array(more, dtype=float)
        assert price(card, high).peak_bytes[0] >= price(card, low).peak_bytes[0]


def test_peak_grows_with_tokens_through_the_pipeline():
    """The predicted peak of the reference workload shape grows with its total tokens at CP1 and CP2."""
    card = load_model(MODEL)
    for cp in (1, 2):
        peaks = [
            predict(
                card, topology=Topology(cp=cp), num_layers=8, phase="cold", num_requests=10, total_tokens=n
            ).peak_bytes
            for n in (20_000, 60_000, 120_000, 195_000)
        ]
        assert peaks == sorted(peaks) and len(set(peaks)) == len(peaks)


@pytest.mark.parametrize("name", CARDS)
def test_peak_grows_with_layers(name):
    """For fixed local quantities, the predicted peak never drops when one more layer is added, from one
    layer to the full depth, at CP1 and CP4, cold and warm."""
    card = load_model(name)
    q = np.zeros(len(QUANTITIES))
    q[[QUANTITY_INDEX[k] for k in ("tokens", "grad_tokens", "loss_tokens")]] = 50_000
    q[QUANTITY_INDEX["segments"]] = 20
    for topology in (Topology(), Topology(cp=4)):
        q[QUANTITY_INDEX["remote_tokens"]] = 50_000 * (topology.cp - 1)
        for phase in ("cold", "warm"):
            peaks = [
                int(price(card.resolve(topology, num_layers=n, phase=phase), q).peak_bytes[0])
                for n in range(1, card.geometry.num_layers + 1)
            ]
            assert all(b >= a for a, b in itertools.pairwise(peaks)), (topology, phase)
            assert peaks[-1] > peaks[0]


# ------------------------------------------------------------------------------- layers and phases


def test_layers_keep_the_layer_pattern():
    """--layers N repeats and truncates the 3:1 GDN:attention pattern: 8 layers are 6 GDN + 2 attention;
    3 layers have no attention layer, so no attention term is priced; more layers than the model has
    are refused naming the field."""
    card = load_model(MODEL)
    env = card.environment(Topology(), 8)
    assert (env["gdn_layers"], env["attn_layers"], env["moe_layers"]) == (6, 2, 8)
    assert "attention_recompute" not in term_bytes(MODEL, Topology(), layers=3)
    with pytest.raises(InputError, match="layers"):
        card.resolve(Topology(), num_layers=41)


def test_cli_layers_and_phase_price_the_truncated_model(tmp_path):
    """``cpplan plan --layers 8 --phase warm`` reports the peak of the 8-layer warm prediction, lower
    than the cold one, which is lower than the full 40-layer model's."""
    workload = tmp_path / "w.jsonl"
    workload.write_text(to_jsonl(unique_workload(4, 40_000)))
    greedy_only = tmp_path / "greedy.toml"  # the plan whose ownership `predict` reproduces
    greedy_only.write_text('name = "greedy-only"\ntime_budget_s = 10\nstrategies = ["greedy"]\n')
    peaks = {}
    for key, extra in {
        "8w": ["--layers", "8", "--phase", "warm"],
        "8c": ["--layers", "8"],
        "40c": [],
    }.items():
        out = tmp_path / f"{key}.json"
        args = ["plan", str(workload), "--model", MODEL, "--topology", "cp=2", "--memory", "500GB"]
        args += ["--solver", str(greedy_only)]
        assert main([*args, *extra, "--output", str(out), "--quiet"]) == 0
        plan = json.loads(out.read_text())
        peaks[key] = max(r["peak_bytes"] for w in plan["waves"] for r in w["ranks"])
    expected = predict(
        load_model(MODEL),
        topology=Topology(cp=2),
        num_layers=8,
        phase="warm",
        num_requests=4,
        total_tokens=40_000,
    )
    assert peaks["8w"] == expected.peak_bytes
    assert peaks["8w"] < peaks["8c"] < peaks["40c"]


def test_gdn_pending_floor_is_per_rank_segments():
    """At CP2 and CP4 every rank's breakdown carries the GDN pending floor for the segments it touches
    (segments x 12,877,824 B at 8 layers), not only at CP1."""
    card = load_model(MODEL)
    for cp in (1, 2, 4):
        wave = predict(
            card, topology=Topology(cp=cp), num_layers=8, phase="warm", num_requests=10, total_tokens=195_000
        )
        segments = wave.quantities[:, QUANTITY_INDEX["segments"]]
        pending = wave.prices.term_bytes[:, _term(card, cp, "gdn_pending_state")]
        assert (segments >= 1).all()
        assert pending.tolist() == (segments * 12_877_824).tolist()


def _term(card, cp, name) -> int:
    return card.resolve(Topology(cp=cp), num_layers=8, phase="warm").term_names.index(name)


def test_transferred_cards_carry_the_calibrated_coefficients():
    """Cards not measured themselves carry qwen3.6-35b-a3b's calibrated ratios (marked transferred),
    so a recalibration cannot leave them silently stale."""
    reference = load_model(MODEL).calibration.coefficients
    for name in available_models():
        card = load_model(name)
        if name == MODEL or card.calibration is None:
            continue
        assert card.calibration.method.startswith("transferred")
        assert card.calibration.coefficients == reference, name


def test_cold_excess_grows_with_tokens_and_warm_omits_it():
    """The cold peak exceeds the warm peak of the same wave, and the excess grows with the rank's tokens
    (60,000 vs 195,000 tokens at CP2), as the measured first-call excess does."""
    card = load_model(MODEL)

    def excess(tokens: int) -> int:
        peaks = {
            phase: predict(
                card, topology=Topology(cp=2), num_layers=8, phase=phase, num_requests=10, total_tokens=tokens
            ).peak_bytes
            for phase in ("cold", "warm")
        }
        return peaks["cold"] - peaks["warm"]

    small, large = excess(60_000), excess(195_000)
    assert 0 < small < large
