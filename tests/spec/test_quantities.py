"""The local-quantity registry: sound entries, rules checked at import, and a new quantity end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cpplan.spec.quantities import COUNTS, QUANTITIES, RANK_BOUNDS, Quantity, check_rules

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parents[1] / "support" / "extended_registry.py"


def test_every_entry_states_a_count_and_a_sound_bound():
    """Every registry entry names a known count and a CP-SAT bound that is sound for that count."""
    for q in QUANTITIES:
        assert q.count in COUNTS and q.rank_bound in RANK_BOUNDS, q
    with pytest.raises(AssertionError, match="does not bound"):
        Quantity(name="bad", count="pair", rank_bound="chunk_cap")
    with pytest.raises(AssertionError, match="only per-token counts"):
        Quantity(name="bad", count="segment", rank_bound="wave_segments", only="grad")


def test_a_consumer_without_a_rule_for_some_kind_fails():
    """check_rules names the consumer and the kinds it has no rule for."""
    with pytest.raises(AssertionError, match=r"my\.consumer has no rule for quantity kind\(s\) \['remote'\]"):
        check_rules("my.consumer", ("token", "pair", "segment"), COUNTS)


def test_a_new_quantity_is_one_registry_entry_plus_its_card_terms(tmp_path):
    """With one registry entry added (and nothing else of cpplan changed), a card that prices the new
    quantity plans with greedy and CP-SAT, every plan passes the verifier, and the plan JSON reports it."""
    base = (ROOT / "models" / "qwen3-8b.toml").read_text()
    card = tmp_path / "extended.toml"
    extra = '[memory.terms.logit_buffer]\nquantity = "logit_tokens"\nbytes_per_unit = 4096\n\n'
    text = base.replace('name = "qwen3-8b"', 'name = "qwen3-8b-extended"', 1)
    first_envelope = text.index("[[memory.envelopes]]")
    text = text[:first_envelope] + extra + text[first_envelope:]
    text = text.replace('terms = ["', 'terms = ["logit_buffer", "')  # every envelope
    card.write_text(text)
    workload = tmp_path / "w.jsonl"
    lines = []
    for g in range(3):
        prompt = [1000 * g + k for k in range(700)]
        for s in range(3):
            lines.append({"id": f"g{g}s{s}", "tokens": prompt + [50_000 + 100 * s + k for k in range(300)]})
    workload.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(card), str(workload)], capture_output=True, text=True, check=True
    )
    out = json.loads(done.stdout)
    assert out["base"]["valid"] and out["extended"]["valid"]
    assert {"greedy", "cpsat"} <= set(out["extended"]["strategies"])
    assert out["extended"]["logit"] == out["extended"]["loss"] and sum(out["extended"]["logit"]) > 0
    assert out["extended"]["waves"] == out["base"]["waves"]  # the budget is generous
    for logit, extended, base in zip(
        out["extended"]["logit"], out["extended"]["peaks"], out["base"]["peaks"], strict=True
    ):
        assert extended - base == pytest.approx(1.1 * 4096 * logit, abs=2)
