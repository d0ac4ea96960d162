"""CP-SAT's models: the joint model of waves and layouts (the CP-SAT proposer, :func:`compile_model`), the
ownership model (the decide stage, :mod:`~cpplan.cpsat.owned_model`) and the schedule model (waves on a
pool of CP groups, :mod:`~cpplan.cpsat.schedule_model`); the planner's loop
(:func:`cpplan.planners.portfolio.solve`) runs them. The joint model's decomposition (decision space,
wave assignment, sharing, chunk caps, memory rows, objective, exact columns, realization) is stated in
docs/cpsat.md and in each module's docstring; integer units and rounding live in
:mod:`~cpplan.cpsat.scaling` only.
"""

from cpplan.cpsat.joint_model import CompiledModel, ModelValues, compile_model
from cpplan.cpsat.realize import realize
from cpplan.cpsat.scaling import SCALING, Scaling
from cpplan.cpsat.solve import Solution, solve
from cpplan.cpsat.space import LayoutSpace, build_space

__all__ = [
    "SCALING",
    "CompiledModel",
    "LayoutSpace",
    "ModelValues",
    "Scaling",
    "Solution",
    "build_space",
    "compile_model",
    "realize",
    "solve",
]
