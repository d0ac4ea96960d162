#!/usr/bin/env bash
# Install what `cpplan gpu-check` needs on a fresh GPU machine, then print the versions and the GPU.
#
#   bash scripts/gpu_setup.sh                 # from the package registry
#   bash scripts/gpu_setup.sh --wheels DIR    # offline: from wheels downloaded beforehand (no index)
#
# The CUDA build of torch is kept when the Python in use already has one that sees a GPU; otherwise
# `pip install torch` is run (the registry's Linux x86-64 torch wheel is a CUDA build; set
# TORCH_INDEX_URL to take another CUDA build from another index). Then flash-linear-attention and the
# project with its hf and kernels extras. Run it from the repository root; PYTHON picks the interpreter.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
pip_args=()
if [[ "${1:-}" == "--wheels" ]]; then
  pip_args=(--no-index --find-links "${2:?--wheels needs a folder}" --no-build-isolation)
fi
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    "$PYTHON" -m pip install -q torch --index-url "$TORCH_INDEX_URL"
  else
    "$PYTHON" -m pip install -q "${pip_args[@]:0:3}" torch
  fi
fi
# Keep the torch that is there (and the triton it brought): install the rest without touching it.
"$PYTHON" -m pip install -q "${pip_args[@]}" -e '.[hf,kernels]' \
  --constraint <("$PYTHON" -c 'import torch; print(f"torch=={torch.__version__}")')
"$PYTHON" - <<'PY'
import importlib.metadata as md

import torch

for name in ("torch", "triton", "transformers", "peft", "flash-linear-attention", "fla-core", "cpplan"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} not installed")
print(f"CUDA {torch.version.cuda}; GPU: " + (torch.cuda.get_device_name() if torch.cuda.is_available() else "none"))
PY
