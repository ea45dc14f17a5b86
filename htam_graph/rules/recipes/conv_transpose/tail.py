"""The reference forward kept as it is, its one transposed-conv module call replaced (conv_transpose_as_conv).

Used when the ops around the transposed conv are not one elementwise epilogue (pooling, norms, reductions):
ModelNew.forward is Model.forward's own text, with `self.<conv>(v)` replaced by `CALL_FUNCTION(self.<conv>,
v)`, so every other op runs exactly as in the reference (same torch calls, same submodules: ModelNew's
`__init__` is the reference's). Only forwards whose every name is an argument, a local, a builtin or an import
the generated file carries are accepted, so the file stands alone.
"""

from __future__ import annotations

import ast
import builtins

from htam_graph.rules.base import NotApplicable

__all__ = ["CALL_FUNCTION", "rewritten_forward"]

CALL_FUNCTION = "conv_transpose_as_conv"
# a call under these runs any number of times (or never): the rewrite keeps it only where it runs once
_REPEATING = (
    ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
)  # fmt: skip


def rewritten_forward(
    forward_source: str, module_path: str, imports: tuple[str, ...], generated_names: frozenset[str]
) -> tuple[str, ...]:
    """ModelNew.forward's body lines: Model.forward's, with the module call replaced. Raises NotApplicable.

    `generated_names`: the module-level names of the generated file, which the forward may not rebind.
    """
    if not forward_source:
        raise NotApplicable("the task's forward source is not available")
    fn = ast.parse(forward_source).body[0]
    if not isinstance(fn, ast.FunctionDef):
        raise NotApplicable("Model.forward is not a plain function")
    target = f"self.{module_path}"
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _dotted(n.func) == target]
    if len(calls) != 1:
        raise NotApplicable(f"Model.forward calls {target} {len(calls)} times in its text, not once")
    call = calls[0]
    if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        raise NotApplicable(f"{target} is called with other than one positional argument")
    _check_runs_once(fn, call)
    _check_names(fn, imports, generated_names)
    new_fn = _Replace(target).visit(fn)
    ast.fix_missing_locations(new_fn)
    body = new_fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring: ModelNew.forward has none
    return tuple(line for stmt in body for line in ast.unparse(stmt).splitlines())


class _Replace(ast.NodeTransformer):
    def __init__(self, target: str) -> None:
        self.target = target

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _dotted(node.func) != self.target:
            return node
        return ast.Call(func=ast.Name(CALL_FUNCTION, ast.Load()), args=[node.func, *node.args], keywords=[])


def _check_runs_once(fn: ast.FunctionDef, call: ast.Call) -> None:
    parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}
    node: ast.AST = call
    while node is not fn:
        node = parents[node]
        if isinstance(node, _REPEATING) and node is not fn:
            raise NotApplicable(f"the transposed conv is called inside a {type(node).__name__}")


def _check_names(fn: ast.FunctionDef, imports: tuple[str, ...], generated: frozenset[str]) -> None:
    """Every name the forward reads must exist in the generated file; it may not rebind a generated name."""
    imported = {"torch", "nn", "triton", "tl", "math"}
    for line in imports:
        for stmt in ast.parse(line).body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                imported |= {a.asname or a.name.split(".")[0] for a in stmt.names}
    args = fn.args
    bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Global | ast.Nonlocal):
            raise NotApplicable("Model.forward declares global or nonlocal names")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            if node.id in generated or node.id in imported:
                raise NotApplicable(f"Model.forward assigns {node.id!r}, a name the generated file defines")
            bound.add(node.id)
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in bound or node.id in imported or (hasattr(builtins, node.id) and node.id != "Model"):
                continue
            raise NotApplicable(
                f"Model.forward uses the task-level name {node.id!r}; ModelNew must stand alone"
            )


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None
