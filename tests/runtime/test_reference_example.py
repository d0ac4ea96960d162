"""The bundled example runs end to end and reports a packed-vs-unpacked difference at rounding level."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_reference.py"


@pytest.mark.slow  # runs the example script
def test_grpo_reference_example():
    """``examples/grpo_reference.py`` prints one row per CP rank whose token counts sum to the wave's
    packed tokens, and a max logit difference against the unpacked run below 1e-12 (float64)."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--cp", "3", "--prompts", "1", "--group", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    packed = int(re.search(r"wave 0: .*?, ([\d,]+) packed", run.stdout).group(1).replace(",", ""))
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+\d+\s+", run.stdout, flags=re.MULTILINE)
    assert [int(r) for r, _ in rows] == [0, 1, 2]
    assert sum(int(t) for _, t in rows) == packed
    diff = float(re.search(r"unpacked logits\| over \d+ requests: (\S+)", run.stdout).group(1))
    assert diff < 1e-12
