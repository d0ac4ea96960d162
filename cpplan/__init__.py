"""cpplan: a declarative CP-SAT planner for packed, context-parallel LLM training waves.

Every public name is loaded on first use, so ``import cpplan`` (and the ``cpplan`` command's start-up)
imports neither OR-Tools nor torch; ``cpplan.PackDataset`` imports torch when it is first touched.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "build_problem": "cpplan.api",
    "plan": "cpplan.api",
    "solve": "cpplan.api",
    "verify": "cpplan.api",
    "CpplanError": "cpplan.errors",
    "InputError": "cpplan.errors",
    "NoFitError": "cpplan.errors",
    "UnsupportedTopologyError": "cpplan.errors",
    "Planner": "cpplan.planner",
    "Problem": "cpplan.pricing.problem",
    "Candidate": "cpplan.plans.plan",
    "Plan": "cpplan.plans.plan",
    "PlanResult": "cpplan.plans.result",
    "SolverStats": "cpplan.plans.plan",
    "PrefixTree": "cpplan.pricing.tree",
    "RankBatch": "cpplan.runtime.materialize",
    "materialize": "cpplan.runtime.materialize",
    "materialize_wave": "cpplan.runtime.materialize",
    "materialize_pool": "cpplan.runtime.pool",
    "pool_waves": "cpplan.runtime.pool",
    "PackDataset": "cpplan.runtime.pack_dataset",
    "ModelCard": "cpplan.spec.card",
    "ResolvedCard": "cpplan.spec.card",
    "available_models": "cpplan.spec.card",
    "load_model": "cpplan.spec.card",
    "SolverProfile": "cpplan.spec.profile",
    "available_solvers": "cpplan.spec.profile",
    "load_solver": "cpplan.spec.profile",
    "Settings": "cpplan.spec.settings",
    "Topology": "cpplan.spec.topology",
    "Item": "cpplan.spec.workload",
    "Request": "cpplan.spec.workload",
    "Workload": "cpplan.spec.workload",
    "Verification": "cpplan.verifier",
}

__all__ = [
    "Candidate",
    "CpplanError",
    "InputError",
    "Item",
    "ModelCard",
    "NoFitError",
    "PackDataset",
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
    "__version__",
    "available_models",
    "available_solvers",
    "build_problem",
    "load_model",
    "load_solver",
    "materialize",
    "materialize_pool",
    "materialize_wave",
    "plan",
    "pool_waves",
    "solve",
    "verify",
]


def __getattr__(name: str) -> Any:
    """Load a public name, ``__version__`` or a subpackage (``cpplan.pack``) on first use and keep it."""
    if name == "__version__":
        from cpplan.version import cpplan_version

        value: Any = cpplan_version()
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif importlib.util.find_spec(f"cpplan.{name}") is not None:  # a subpackage: cpplan.pack, cpplan.hf
        value = importlib.import_module(f"cpplan.{name}")
    else:
        raise AttributeError(f"module 'cpplan' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and editors see
    from cpplan.api import build_problem, plan, solve, verify
    from cpplan.errors import CpplanError, InputError, NoFitError, UnsupportedTopologyError
    from cpplan.planner import Planner
    from cpplan.plans.plan import Candidate, Plan, SolverStats
    from cpplan.plans.result import PlanResult
    from cpplan.pricing.problem import Problem
    from cpplan.pricing.tree import PrefixTree
    from cpplan.runtime.materialize import RankBatch, materialize, materialize_wave
    from cpplan.runtime.pack_dataset import PackDataset
    from cpplan.runtime.pool import materialize_pool, pool_waves
    from cpplan.spec.card import ModelCard, ResolvedCard, available_models, load_model
    from cpplan.spec.profile import SolverProfile, available_solvers, load_solver
    from cpplan.spec.settings import Settings
    from cpplan.spec.topology import Topology
    from cpplan.spec.workload import Item, Request, Workload
    from cpplan.verifier import Verification

    __version__: str
