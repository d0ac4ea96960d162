"""examples/pack_and_train.py: the road from a dataset to training steps runs end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # packs and trains a small model in a subprocess
def test_pack_and_train_example_runs(tmp_path):
    """The example packs its conversations, reads replica 0's waves through PackDataset for both CP
    ranks and takes a training step per wave, the loss going down."""
    proc = subprocess.run(
        [sys.executable, "examples/pack_and_train.py", "--output", str(tmp_path / "out"), "--steps", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("step")]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow  # packs and trains a small model in a subprocess
def test_pack_and_train_example_leaves_no_temporary_folder(tmp_path):
    """Without --output the example packs into a temporary folder and removes it (and the conversations
    beside it) when it ends: nothing named cpplan-pack-* is left in the temporary directory."""
    proc = subprocess.run(
        [sys.executable, "examples/pack_and_train.py", "--steps", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "step 0:" in proc.stdout
    assert list(tmp_path.glob("cpplan-pack-*")) == []
