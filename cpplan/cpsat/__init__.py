"""CP-SAT's models: the joint model of waves and layouts (the CP-SAT proposer), the ownership model (the
stage that decides which proposed waves run and who owns every chunk, :mod:`~cpplan.cpsat.owned_model`)
and the schedule model (waves on a pool of CP groups, :mod:`~cpplan.cpsat.schedule_model`). The planner's
loop (:func:`cpplan.planners.portfolio.solve`) runs them as its propose and decide stages.

The joint model, decomposed (stated):

1. :mod:`~cpplan.cpsat.space` precomputes the decision space from the prefix tree: *cross* nodes
   (shared by several items; per-wave sharing variables) and each item's Pareto set of *local*
   layouts (its own sharing decisions, with exact constants).
2. The joint model (:func:`compile_model`) chooses, at once, each item's wave and local layout
   (:mod:`~cpplan.cpsat.waves`), the per-wave sharing of cross nodes and the resulting copies,
   segment starts and totals (:mod:`~cpplan.cpsat.sharing`), per-wave chunk counts and per-rank chunk
   caps (or, under CP, per-rank caps on a chunk weight that charges each rank its own segments) with
   upper bounds on every rank's local quantities (:mod:`~cpplan.cpsat.chunk_caps`), every
   wave / envelope / rank memory floor in KiB (:mod:`~cpplan.cpsat.memory`), and minimizes per-wave
   overhead plus slowest-rank time (:mod:`~cpplan.cpsat.objective`). Integer units and rounding live
   in :mod:`~cpplan.cpsat.scaling` only.
   The per-rank bounds are conservative, so a wave the exact evaluator accepts at the memory edge can
   break them. Known exact waves (the greedy plan's) therefore enter as *columns*
   (:mod:`~cpplan.cpsat.columns`): each item is covered either by an ``x`` variable or by a taken
   column, a slot taking a column holds nothing else, is exempt from the conservative rows and costs
   the column's exact time (rounded up). The greedy plan is thus always a solution of the model, and
   the proven bound is a lower bound of a model that contains it.
3. :func:`~cpplan.cpsat.realize.realize` emits a slot that took a column as the column's own priced
   wave, unchanged; it packs every other wave, assigns its chunks to ranks exactly (capped,
   time-balanced contiguous ranges, within the model's caps) and prices it with the numpy evaluator;
   :func:`solve` first re-evaluates the answer in plain Python, and the portfolio then verifies the
   realized plan independently.
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
