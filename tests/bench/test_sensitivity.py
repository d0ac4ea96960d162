"""``cpplan bench --sensitivity``: each uncertain constant scaled by 1/2 and 2 moves the chosen plan."""

from __future__ import annotations

import json

import numpy as np

from cpplan.bench.sensitivity import KNOBS, format_sensitivity, run_sensitivity, scaled_card
from cpplan.bench.suites import Case
from cpplan.spec.card import load_model
from cpplan.spec.workload import Item, Request, Workload


def _case() -> Case:
    """A small workload with GDN work: four requests of 2K to 6K tokens."""
    items = tuple(
        Item(id=f"r{k}", requests=(Request(tokens=np.arange(2000 + 1300 * k) % 991),)) for k in range(4)
    )
    return Case(name="tiny", family="test", build=lambda: Workload(items=items))


def test_scaled_card_scales_only_the_named_constants():
    """Scaling a knob multiplies exactly its constants (or hardware fields) and nothing else."""
    card = load_model("qwen3.6-35b-a3b")
    knob = next(k for k in KNOBS if k.name == "gdn_recurrence")
    scaled = scaled_card(card, knob, 2.0)
    for name, value in card.constants.items():
        assert scaled.constants[name] == (2 * value if name in knob.names else value)
    latency = next(k for k in KNOBS if k.name == "collective_latency")
    slow = scaled_card(card, latency, 0.5)
    assert slow.hardware.collective_base_s == card.hardware.collective_base_s / 2
    assert slow.hardware.interconnect_bytes_per_s == card.hardware.interconnect_bytes_per_s


def test_sensitivity_reports_how_the_chosen_plan_moves():
    """On a small case over CP 1 and 2 of the pool: the card's choice and, per knob and factor, the chosen
    plan; a costlier GDN recurrence makes the step slower and a cheaper one faster, a faster attention
    kernel (higher MFU) faster; the table and JSON carry it."""
    knobs = [k for k in KNOBS if k.name in ("gdn_recurrence", "mfu_attention")]
    result = run_sensitivity(cases=[_case()], sizes=(1, 2), knobs=knobs, memory="40GiB")
    rows = result["rows"]
    assert len(rows) == 1 + 2 * len(knobs)
    base = rows[0]
    assert base["knob"] == "" and base["cp"] in (1, 2) and base["cost_s"] > 0
    gdn = {r["factor"]: r for r in rows if r["knob"] == "gdn_recurrence"}
    assert gdn[0.5]["cost_s"] < base["cost_s"] < gdn[2.0]["cost_s"]
    assert gdn[2.0]["cost_change"] > 0 > gdn[0.5]["cost_change"]
    attention = {r["factor"]: r for r in rows if r["knob"] == "mfu_attention"}
    assert attention[2.0]["cost_s"] < base["cost_s"] < attention[0.5]["cost_s"]
    table = format_sensitivity(result)
    assert "gdn_recurrence" in table and "tiny" in table
    json.dumps(result)


def test_the_interconnect_knob_scales_the_all_to_all_too(qwen36):
    """The interconnect knob moves the all-gather bus bandwidth and the card's all-to-all bandwidth
    together (head-parallel and EP all-to-alls are priced by the latter)."""
    knob = next(k for k in KNOBS if k.name == "interconnect")
    slow = scaled_card(qwen36, knob, 0.5)
    assert slow.constants["all_to_all_bytes_per_s"] == qwen36.constants["all_to_all_bytes_per_s"] * 0.5
    assert slow.hardware.interconnect_bytes_per_s == qwen36.hardware.interconnect_bytes_per_s * 0.5
