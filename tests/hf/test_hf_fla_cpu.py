"""flash-linear-attention's Triton kernels on the CPU, under Triton's interpreter, against pure torch.

The checks run in a subprocess (``tests/support/fla_cpu_worker.py``) because ``TRITON_INTERPRET=1``
must be set before triton and fla are imported, and fla's kernels need two interpreter patches
(``tests/support/triton_interpreter.py``). They skip only when fla or triton does not import
(``pip install -e '.[kernels]'``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # about 25 s of CPU: the interpreter runs every kernel in numpy


@pytest.fixture(scope="module")
def report() -> dict:
    """The worker's measurements (or the skip, with the import error it met)."""
    env = os.environ | {"TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.fla_cpu_worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if "import_error" in found:
        pytest.skip(f"flash-linear-attention or triton does not import: {found['import_error']}")
    return found


def test_fla_gated_delta_rule_equals_torch(report):
    """fla's chunk_gated_delta_rule (varlen cu_seqlens, one initial state per sequence, grouped heads)
    gives the pure-torch chunked rule's outputs, final states and input gradients within float32
    rounding, and it really ran."""
    assert report["delta_rule_calls"] == 1
    assert report["delta_rule"]["out"] <= 1e-5
    assert report["delta_rule"]["state"] <= 1e-5
    assert report["delta_rule"]["grad"] <= 1e-5


def test_fla_path_of_packed_logprobs_equals_torch(report):
    """``packed_logprobs(kernels="fla")`` of a GDN model on a CP-2 zigzag wave with shared prefixes (so
    pieces start from states of parents and of other ranks) gives the pure-torch path's log-probs and
    parameter gradients within float32 rounding, with fla running every recurrence step."""
    assert report["packed_calls"] >= 2
    assert report["packed"]["sources_on_other_ranks"] >= 1
    assert report["packed"]["logprobs"] <= 1e-5
    assert report["packed"]["grad"] <= 1e-5


def test_fla_parallel_state_passing_equals_torch(report):
    """The same wave with its states passed in parallel (``gdn_handoff = "parallel"``: fla runs the
    zero-state pieces, the transitions from the identity with ``key dim`` value columns and the reruns),
    on a model whose states carry across pieces, gives the pure-torch path's log-probs and parameter
    gradients, and fla's rounds' log-probs, within float32 rounding."""
    assert report["parallel_calls"] >= 3
    assert report["parallel"]["sources_on_other_ranks"] >= 1
    assert report["parallel"]["logprobs"] <= 1e-5
    assert report["parallel"]["grad"] <= 1e-5
    assert report["parallel"]["vs_rounds"] <= 1e-5
