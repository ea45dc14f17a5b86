"""The parts of a task's source that ModelNew reuses verbatim: its imports and `Model.__init__`.

ModelNew must hold the same parameters under the same names, created in the same order (so that the same seed
gives the same weights), with the same constructor signature. Copying `__init__` (with `super(Model, self)`
rewritten to `super()`) is the one way to guarantee all three. An `__init__` that needs other task-level names
(helper classes, module constants) is not applicable: the generated file must stand alone.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable, cached_by_source

__all__ = ["ModelSkeleton", "check_zero_padding_mode", "model_skeleton"]

_STANDARD_IMPORTS = ("import torch", "import torch.nn as nn", "import triton", "import triton.language as tl")


@dataclass(frozen=True)
class ModelSkeleton:
    """`imports`: the generated file's import lines. `init_source`: ModelNew's `__init__`, indented 4 spaces.

    `forward_source`: the reference's `Model.forward`, unindented (for recipes that keep part of it as it is;
    the names it reads are NOT checked here: such a recipe checks them itself).
    """

    imports: tuple[str, ...]
    init_source: str
    forward_args: tuple[str, ...]
    forward_source: str = ""


@cached_by_source
def model_skeleton(source: str) -> ModelSkeleton:
    """Extract the skeleton from a task source. Raises NotApplicable (reasons are cached like results)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise NotApplicable(f"the task source does not parse: {e.msg}") from e
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise NotApplicable("the task defines no class Model")
    init = _method(model, "__init__")
    forward = _method(model, "forward")
    if init is None or forward is None:
        raise NotApplicable("Model has no __init__ or no forward")
    imports = _task_imports(tree)
    _check_free_names(init, _imported_names(imports))
    init = _SuperRewriter().visit(init)
    ast.fix_missing_locations(init)
    init_source = "\n".join("    " + line if line else line for line in ast.unparse(init).splitlines())
    if forward.args.vararg or forward.args.kwarg or forward.args.kwonlyargs:
        raise NotApplicable("Model.forward takes *args/**kwargs or keyword-only arguments")
    forward_args = _forward_args(forward)
    return ModelSkeleton(_merge_imports(imports), init_source, forward_args, ast.unparse(forward))


def check_zero_padding_mode(init_source: str) -> None:
    """padding_mode is not in the analysed graph: any padding_mode other than a literal 'zeros' in __init__
    raises NotApplicable (the conv kernels write zero padding only)."""
    tree = ast.parse("if True:\n" + init_source)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "padding_mode":
            if not (isinstance(node.value, ast.Constant) and node.value.value == "zeros"):
                raise NotApplicable(
                    f"padding_mode={ast.unparse(node.value)} in __init__: only zero padding is written"
                )


def _forward_args(forward: ast.FunctionDef) -> tuple[str, ...]:
    """ModelNew.forward's parameters: the task's names; a default is kept when it is a literal and becomes
    None otherwise (`fn=forward_fn` names a function the standalone file lacks; the analysis traced that
    default, so the kernel computes what the task computes when the parameter is not passed)."""
    params = forward.args.args[1:]
    defaults = [None] * (len(params) - len(forward.args.defaults)) + list(forward.args.defaults)
    out = []
    for param, default in zip(params, defaults, strict=True):
        if default is None:
            out.append(param.arg)
        elif isinstance(default, ast.Constant):
            out.append(f"{param.arg}={ast.unparse(default)}")
        else:
            out.append(f"{param.arg}=None")
    return tuple(out)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _task_imports(tree: ast.Module) -> list[ast.stmt]:
    return [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]


def _imported_names(imports: list[ast.stmt]) -> set[str]:
    names: set[str] = {"torch", "nn", "triton", "tl"}
    for node in imports:
        assert isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names:
            names.add(alias.asname or alias.name.split(".")[0])
    return names


def _merge_imports(imports: list[ast.stmt]) -> tuple[str, ...]:
    lines = list(_STANDARD_IMPORTS)
    for node in imports:
        text = ast.unparse(node)
        if text not in lines:
            lines.append(text)
    return tuple(lines)


def _check_free_names(init: ast.FunctionDef, imported: set[str]) -> None:
    """Every name __init__ reads must be an argument, a local, a builtin or an import the file will carry."""
    args = init.args
    bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in ast.walk(init):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):  # `import math` inside __init__ (copied with it)
            bound.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    for node in ast.walk(init):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in bound or node.id in imported or hasattr(builtins, node.id) or node.id == "Model":
                continue
            raise NotApplicable(
                f"Model.__init__ uses the task-level name {node.id!r}; ModelNew must stand alone"
            )


class _SuperRewriter(ast.NodeTransformer):
    """`super(Model, self)` -> `super()` (the generated file has no `Model`)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name) and node.func.id == "super" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Name) and first.id == "Model":
                return ast.Call(func=node.func, args=[], keywords=[])
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "Model":
            raise NotApplicable("Model.__init__ refers to Model other than in super(Model, self)")
        return node
