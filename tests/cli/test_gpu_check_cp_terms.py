"""The gpu-check kit's CP terms: on the CPU both parts skip with their reason, and the report
and its markdown carry them."""

from __future__ import annotations

import json

from cpplan.gpu_check import cp_terms
from cpplan.gpu_check.check_run import STEPS, CheckConfig, run_check
from cpplan.gpu_check.report_files import markdown


def test_cpu_skips_both_parts_with_their_reason():
    """Off CUDA the ring-block sweep and the all-to-all measurement run nothing and say why; neither
    consults the time guard (no estimate is asked for)."""
    asked: list[float] = []
    block = cp_terms.ring_block_sweep(
        cp_terms.GPU_BLOCK,
        device="cpu",
        allowed=lambda s: asked.append(s) or True,
        card_s_per_pair=1e-10,
        card_cp_efficiency=0.9,
    )
    a2a = cp_terms.all_to_all_measurement(
        device="cpu", card_all_to_all_bytes_per_s=349e9, card_all_gather_bytes_per_s=365e9
    )
    assert block == {"status": "skipped", "reason": block["reason"]} and "CUDA" in block["reason"]
    assert a2a == {"status": "skipped", "reason": a2a["reason"]} and "CUDA" in a2a["reason"]
    assert asked == []


def test_dry_run_reports_the_cp_terms_step(tmp_path):
    """``cp_terms`` is one of the check's steps; a dry run of it alone writes both parts as skipped into
    gpu_check.json (with the step's time), lists them in gpu_check.md, and still passes (a skip for want
    of hardware is not a failure)."""
    assert "cp_terms" in STEPS
    report, code = run_check(
        CheckConfig(output=tmp_path, dry_run=True, steps=("cp_terms",)), echo=lambda line: None
    )
    assert code == 0 and report["passed"]
    written = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(written["cp_terms"]) == {"ring_block", "all_to_all"}
    assert all(part["status"] == "skipped" and part["reason"] for part in written["cp_terms"].values())
    assert "cp_terms" in written["step_s"]
    text = (tmp_path / "gpu_check.md").read_text()
    assert "## CP terms" in text and "- ring_block: skipped (" in text and "- all_to_all: skipped (" in text


def test_measured_parts_render_as_tables(tmp_path):
    """A measured ring-block sweep and all-to-all (as a GPU run writes them, put into a dry run's report)
    render as tables with the efficiency and both bus bandwidths."""
    report, _ = run_check(
        CheckConfig(output=tmp_path, dry_run=True, steps=("cp_terms",)), echo=lambda line: None
    )
    report["cp_terms"] = {
        "ring_block": {
            "status": "measured",
            "rows": [{"block_tokens": 512, "seconds": 0.001, "s_per_pair": 3.8e-9, "efficiency": 0.5}],
        },
        "all_to_all": {
            "status": "measured",
            "rows": [
                {
                    "bytes_per_rank": 2**28,
                    "all_to_all_bus_bytes_per_s": 3.3e11,
                    "all_gather_bus_bytes_per_s": 3.6e11,
                }
            ],
        },
    }
    text = markdown(report)
    assert "| 512 | 0.0010 | 3.800e-09 | 0.500 |" in text
    assert "| 268,435,456 | 330.0 | 360.0 |" in text
