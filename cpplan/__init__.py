"""cpplan: a declarative CP-SAT planner for packed, context-parallel LLM training waves.

The public names below are imported on first use (PEP 562), so ``import cpplan`` costs a few
milliseconds and never pulls in OR-Tools or torch: the planner imports OR-Tools where it builds a
CP-SAT model, and torch is imported where tensors are made. ``cpplan.<subpackage>`` (``cpplan.hf``,
``cpplan.runtime``, ...) is imported on first access too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cpplan.errors import CpplanError, InputError, NoFitError, UnsupportedTopologyError

if TYPE_CHECKING:
    from cpplan.api import build_problem, plan, solve, verify
    from cpplan.planner import Planner
    from cpplan.pricing.problem import Problem
    from cpplan.pricing.result import Candidate, Plan, PlanResult, SolverStats
    from cpplan.pricing.tree import PrefixTree
    from cpplan.runtime.materialize import RankBatch, materialize, materialize_wave
    from cpplan.spec.card import ModelCard, ResolvedCard, available_models, load_model
    from cpplan.spec.profile import SolverProfile, available_solvers, load_solver
    from cpplan.spec.settings import Settings
    from cpplan.spec.topology import Topology
    from cpplan.spec.workload import Item, Request, Workload
    from cpplan.verifier import Verification

_LAZY: dict[str, str] = {
    **dict.fromkeys(("build_problem", "plan", "solve", "verify"), "cpplan.api"),
    "Planner": "cpplan.planner",
    "Problem": "cpplan.pricing.problem",
    **dict.fromkeys(("Candidate", "Plan", "PlanResult", "SolverStats"), "cpplan.pricing.result"),
    "PrefixTree": "cpplan.pricing.tree",
    **dict.fromkeys(("RankBatch", "materialize", "materialize_wave"), "cpplan.runtime.materialize"),
    **dict.fromkeys(("ModelCard", "ResolvedCard", "available_models", "load_model"), "cpplan.spec.card"),
    **dict.fromkeys(("SolverProfile", "available_solvers", "load_solver"), "cpplan.spec.profile"),
    "Settings": "cpplan.spec.settings",
    "Topology": "cpplan.spec.topology",
    **dict.fromkeys(("Item", "Request", "Workload"), "cpplan.spec.workload"),
    "Verification": "cpplan.verifier",
}
"""Each lazily imported public name and the module that defines it."""


def __getattr__(name: str) -> Any:
    """Import a public name (or a subpackage, ``cpplan.hf``) on first access and keep it."""
    module = _LAZY.get(name)
    if module is None:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Module attributes, the lazily imported public names included."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Candidate",
    "CpplanError",
    "InputError",
    "Item",
    "ModelCard",
    "NoFitError",
    "Plan",
    "PlanResult",
    "Planner",
    "PrefixTree",
    "Problem",
    "RankBatch",
    "Request",
    "ResolvedCard",
    "Settings",
    "SolverProfile",
    "SolverStats",
    "Topology",
    "UnsupportedTopologyError",
    "Verification",
    "Workload",
    "available_models",
    "available_solvers",
    "build_problem",
    "load_model",
    "load_solver",
    "materialize",
    "materialize_wave",
    "plan",
    "solve",
    "verify",
]
