"""Options shared by the subcommands that price plans."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import click

from cpplan.pricing.problem import Problem
from cpplan.spec.settings import Settings
from cpplan.spec.workload import Workload


def problem_options(func: Callable) -> Callable:
    """``--model --topology --memory --layers --phase``."""
    options = [
        click.option(
            "--model",
            "model",
            required=True,
            metavar="NAME|PATH",
            help="Shipped model card name or path to a TOML card.",
        ),
        click.option(
            "--topology",
            "topology",
            default="",
            metavar="tp=1,cp=4,...",
            show_default=False,
            help="Parallel sizes; those left out are 1.",
        ),
        click.option(
            "--memory",
            "memory",
            required=True,
            metavar="SIZE",
            help="Bytes a wave may use per rank, e.g. 80GiB, 80GB, 512MiB.",
        ),
        click.option(
            "--layers",
            "layers",
            type=int,
            default=None,
            metavar="N",
            help="Run the card with N layers, keeping its layer pattern.",
        ),
        click.option(
            "--phase",
            "phase",
            type=click.Choice(["cold", "warm"]),
            default="cold",
            show_default=True,
            help="Price a first (cold) call or a warm repeat.",
        ),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), func)


dynamic_cp_option = click.option(
    "--dynamic-cp",
    "dynamic_cp",
    is_flag=True,
    help="Pool the dp x cp GPUs: each wave chooses its CP group size (a power of two); cost is the makespan.",
)
"""``--dynamic-cp``: the topology's ``dynamic_cp`` flag (also ``dynamic_cp=1`` in ``--topology``)."""


def build(
    workload_path: Path,
    model: str,
    topology: str,
    memory: str,
    layers: int | None,
    phase: str,
    *,
    dynamic_cp: bool = False,
) -> Problem:
    """Read the settings and the workload and assemble the problem (errors are :class:`InputError`)."""
    if dynamic_cp:
        topology = f"{topology},dynamic_cp=1" if topology else "dynamic_cp=1"
    settings = Settings.from_user(
        topology=topology, model=model, memory_bytes=memory, num_layers=layers, phase=phase
    )
    return Problem.build(Workload.from_jsonl(workload_path), settings)
