"""A small, safe arithmetic language for model-card formulas.

Card terms are written as formulas over geometry, topology and constants, for example
``"layers * hidden * dtype_bytes / tp"``. Only numbers, names, ``+ - * / // % **``, comparisons,
``and``/``or``/``not``, ``a if condition else b`` and the functions ``min max ceil floor`` are allowed.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor}


class FormulaError(ValueError):
    """A formula is malformed or refers to an unknown name."""


def names_in(formula: str) -> set[str]:
    """The free names a formula refers to (functions excluded)."""
    tree = _parse(formula)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCTIONS}


def evaluate(formula: str | float | int, env: Mapping[str, float]) -> float:
    """Evaluate ``formula`` with the names in ``env``; numbers evaluate to themselves."""
    if isinstance(formula, bool):
        return float(formula)
    if isinstance(formula, int | float):
        return float(formula)
    return _eval(_parse(formula).body, env, formula)


def _parse(formula: str) -> ast.Expression:
    try:
        return ast.parse(formula, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"cannot parse formula {formula!r}: {exc.msg}") from None


def _eval(node: ast.AST, env: Mapping[str, float], text: str) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id in ("true", "True"):
            return 1.0
        if node.id in ("false", "False"):
            return 0.0
        if node.id not in env:
            raise FormulaError(f"unknown name {node.id!r} in formula {text!r}")
        return float(env[node.id])
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return float(_BINARY[type(node.op)](_eval(node.left, env, text), _eval(node.right, env, text)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return float(not _eval(node.operand, env, text))
    if isinstance(node, ast.IfExp):
        chosen = node.body if _eval(node.test, env, text) else node.orelse
        return _eval(chosen, env, text)
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env, text) for v in node.values]
        return float(all(values) if isinstance(node.op, ast.And) else any(values))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if type(op) not in _COMPARE:
                break
            right = _eval(right_node, env, text)
            if not _COMPARE[type(op)](left, right):
                return 0.0
            left = right
        else:
            return 1.0
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return float(_FUNCTIONS[node.func.id](*(_eval(a, env, text) for a in node.args)))
    raise FormulaError(f"unsupported expression {ast.unparse(node)!r} in formula {text!r}")
