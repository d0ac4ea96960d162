"""The GRPO LoRA training example runs end to end on two gloo CP ranks and reports packed losses equal
to the unpacked ones at every step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_lora_train.py"
STEP = re.compile(r"step (\d+): loss packed (\S+) unpacked (\S+) \|diff\| (\S+)")
PACKS = re.compile(r"packs (\d+) tokens into (\d+), (\d+) of them need logits")


@pytest.mark.slow
def test_grpo_lora_example_losses_match():
    """Three optimizer steps: each prints a packed and an unpacked loss that agree within 1e-12, the
    loss changes between steps (the LoRA weights really train), and both ranks end with identical
    weights; the plan needs logits only for the completions the requests' loss masks mark (fewer than
    its packed tokens); the run finishes within two minutes."""
    root = EXAMPLE.parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "3"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [m.groups() for m in STEP.finditer(done.stdout)]
    assert [int(s[0]) for s in steps] == [0, 1, 2], done.stdout
    for _, packed, unpacked, _ in steps:
        assert abs(float(packed) - float(unpacked)) <= 1e-12
    assert len({s[1] for s in steps}) == 3
    assert "ranks hold identical LoRA weights" in done.stdout
    logical, packed, needed = map(int, PACKS.search(done.stdout).groups())
    assert needed < packed < logical
