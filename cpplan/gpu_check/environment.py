"""What the GPU check runs on: package versions and the device."""

from __future__ import annotations

import importlib.metadata
import platform

PACKAGES = (
    ("torch", ("torch",)),
    ("transformers", ("transformers",)),
    ("peft", ("peft",)),
    ("flash-linear-attention", ("flash-linear-attention", "fla-core")),
    ("triton", ("triton",)),
    ("cpplan", ("cpplan",)),
)
"""Reported name and the distributions that provide it (the first installed one is read)."""


def version_of(distributions: tuple[str, ...]) -> str | None:
    """The installed version of the first of ``distributions`` that is installed, else None."""
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def environment(device: str) -> dict:
    """Python, package versions, torch's CUDA version and the device (name and memory on CUDA, "CPU
    dry run" otherwise)."""
    import torch

    out: dict = {"python": platform.python_version()}
    out["packages"] = {name: version_of(dists) for name, dists in PACKAGES}
    out["cuda"] = torch.version.cuda
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        out["device"] = {
            "name": props.name,
            "total_memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "capability": f"{props.major}.{props.minor}",
        }
    else:
        out["device"] = {"name": "CPU dry run", "total_memory_bytes": None}
    return out


def describe(env: dict) -> list[str]:
    """The environment as lines for the console."""
    versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in env["packages"].items())
    device = env["device"]
    memory = device.get("total_memory_bytes")
    where = device["name"] + (f" ({memory / 2**30:.1f} GiB)" if memory else "")
    return [f"python {env['python']}, {versions}, CUDA {env['cuda'] or 'none'}", f"device: {where}"]


__all__ = ["PACKAGES", "describe", "environment", "version_of"]
