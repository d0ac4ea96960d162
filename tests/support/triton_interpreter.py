"""Run flash-linear-attention's Triton kernels on CPU tensors with Triton's interpreter (tests only).

``TRITON_INTERPRET=1`` must be set before ``triton`` is imported. Two gaps of the interpreter (triton
3.9.0) stop fla 0.6.0's kernels, and :func:`enable` patches both:

- autotuned kernels benchmark their configs through a GPU driver (``RuntimeError: 0 active drivers
  ([]). There should only be one.``): the autotuner keeps its first config instead;
- a ``for i in range(n)`` loop variable stays a Python int, so kernels calling ``i.to(tl.int64)`` fail
  (``InterpreterError: AttributeError("'int' object has no attribute 'to'")``): the interpreter's
  rewrite of the kernel source now makes each loop variable a tensor, as the compiler does.
"""

from __future__ import annotations

import ast
import os


def _tensor_loop_variables(self, node: ast.For) -> ast.For:
    node = self.generic_visit(node)
    if isinstance(node.target, ast.Name):
        to_tensor = ast.Attribute(
            value=ast.Name(id="interpreter_semantic", ctx=ast.Load()), attr="to_tensor", ctx=ast.Load()
        )
        cast = ast.Assign(
            targets=[ast.Name(id=node.target.id, ctx=ast.Store())],
            value=ast.Call(
                func=to_tensor,
                args=[ast.Name(id=node.target.id, ctx=ast.Load()), ast.Constant(False)],
                keywords=[],
            ),
        )
        node.body.insert(0, ast.fix_missing_locations(ast.copy_location(cast, node)))
    return node


def enable() -> None:
    """Patch Triton's interpreter for fla's kernels; ``TRITON_INTERPRET=1`` must already be set."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interpreter

    autotuner.Autotuner.prune_configs = lambda self, kwargs: self.configs[:1]
    interpreter.ASTTransformer.visit_For = _tensor_loop_variables
