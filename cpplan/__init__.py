"""cpplan: a declarative CP-SAT planner for packed, context-parallel LLM training waves."""

from cpplan.api import build_problem, plan, solve, verify
from cpplan.errors import CpplanError, InputError, NoFitError, UnsupportedTopologyError
from cpplan.planner import Planner
from cpplan.pricing.problem import Problem
from cpplan.pricing.result import Candidate, Plan, PlanResult, SolverStats
from cpplan.pricing.tree import PrefixTree
from cpplan.runtime.materialize import RankBatch, materialize, materialize_wave
from cpplan.runtime.pool import materialize_pool, pool_waves
from cpplan.spec.card import ModelCard, ResolvedCard, available_models, load_model
from cpplan.spec.profile import SolverProfile, available_solvers, load_solver
from cpplan.spec.settings import Settings
from cpplan.spec.topology import Topology
from cpplan.spec.workload import Item, Request, Workload
from cpplan.verifier import Verification

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
    "materialize_pool",
    "materialize_wave",
    "plan",
    "pool_waves",
    "solve",
    "verify",
]
