"""The CP-SAT planner: waves, layout and CP ownership as one declarative model.

Decomposition (stated, as DESIGN.md allows):

1. :mod:`~cpplan.cpsat.space` precomputes the decision space from the prefix tree: *cross* nodes
   (shared by several items; per-wave sharing variables) and each item's Pareto set of *local*
   layouts (its own sharing decisions, with exact constants).
2. The joint model (:func:`compile_model`) chooses, at once, each item's wave and local layout
   (:mod:`~cpplan.cpsat.waves`), the per-wave sharing of cross nodes and the resulting copies,
   segment starts and totals (:mod:`~cpplan.cpsat.layout`), per-wave chunk counts and per-rank chunk
   caps (or, under CP, per-rank caps on a chunk weight that charges each rank its own segments) with
   upper bounds on every rank's local quantities (:mod:`~cpplan.cpsat.ownership`), every
   wave / envelope / rank memory floor in KiB (:mod:`~cpplan.cpsat.memory`), and minimizes per-wave
   overhead plus slowest-rank time (:mod:`~cpplan.cpsat.objective`). Integer units and rounding live
   in :mod:`~cpplan.cpsat.scaling` only.
3. :func:`~cpplan.cpsat.realize.realize` packs each wave, assigns its chunks to ranks exactly (capped,
   time-balanced contiguous ranges, within the model's caps) and prices it with the numpy evaluator;
   :func:`solve` first re-evaluates the answer in plain Python, and the portfolio then verifies the
   realized plan independently.
"""

from .model import CompiledModel, ModelValues, compile_model
from .realize import realize
from .scaling import SCALING, Scaling
from .solve import CpSatResult, Solution, solve
from .space import LayoutSpace, build_space

__all__ = [
    "SCALING",
    "CompiledModel",
    "CpSatResult",
    "LayoutSpace",
    "ModelValues",
    "Scaling",
    "Solution",
    "build_space",
    "compile_model",
    "realize",
    "solve",
]
