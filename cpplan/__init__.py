"""cpplan: a declarative CP-SAT planner for packed, context-parallel LLM training waves."""

from .api import build_problem, plan, solve, verify
from .card import ModelCard, ResolvedCard, available_models, load_model
from .errors import CpplanError, InputError, NoFitError, UnsupportedTopologyError
from .materialize import RankBatch, materialize, materialize_wave
from .problem import Problem
from .profile import SolverProfile, available_solvers, load_solver
from .result import Candidate, Plan, PlanResult, SolverStats
from .topology import Topology
from .tree import PrefixTree
from .verify import Verification
from .workload import Item, Request, Workload

__all__ = [
    "Candidate",
    "CpplanError",
    "InputError",
    "Item",
    "ModelCard",
    "NoFitError",
    "Plan",
    "PlanResult",
    "PrefixTree",
    "Problem",
    "RankBatch",
    "Request",
    "ResolvedCard",
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
