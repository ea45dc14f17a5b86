"""Loads a KernelBench-form task source into a fresh module, with its size constants overridden.

A task file sets its sizes as module-level constants (`batch_size = 4096`, `M = 1024 * 2`,
`depth, height, width = (16, 32, 32)`, `height = width = 256`, `input_shape = (32768,)`) and derives the rest
from them (`bias_shape = (out_features,)`, `get_inputs()`, `get_init_inputs()`). An override is applied by
inserting `NAME = <literal>` right after every module-level statement that binds NAME to a constant, before the
module runs, so every later derived value follows the new size.

A size written as an integer literal inside `get_inputs` (`torch.rand(batch_size, 3, 224, 224)`) has no name to
rebind: each such literal among the size arguments of a tensor factory (`torch.randn/rand/zeros/ones/empty`,
`randint`'s and `full`'s size) is addressed as `get_inputs#k` (k-th in the function's `ast.walk` order, from 1;
the order survives `ast.unparse`), and an override of that name rewrites the literal itself.
"""

from __future__ import annotations

import ast
import copy
import linecache
import types
from collections.abc import Mapping

from htam_graph.errors import TaskError

OverrideValue = int | tuple[int, ...]

__all__ = [
    "LITERAL_PREFIX",
    "OverrideValue",
    "load_task_module",
    "module_constants",
    "get_inputs_def",
    "literal_sizes",
    "literal_size_nodes",
    "apply_overrides",
]

LITERAL_PREFIX = "get_inputs#"
_SIZE_VARARGS = frozenset({"randn", "rand", "zeros", "ones", "empty"})  # torch.randn(*size) or (size)
_SIZE_ONLY_TUPLE = frozenset({"randint", "full"})  # sizes only in a tuple/list argument (or size=)


def _const_value(node: ast.expr) -> int | float | tuple[int | float, ...] | list[int | float] | None:
    """Evaluate a literal number, simple arithmetic of literals, or a tuple/list of those; else None."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _const_value(node.operand)
        if isinstance(inner, int | float):
            return -inner if isinstance(node.op, ast.USub) else inner
        return None
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, ast.Add | ast.Sub | ast.Mult | ast.FloorDiv | ast.Pow
    ):
        left, right = _const_value(node.left), _const_value(node.right)
        if not (isinstance(left, int | float) and isinstance(right, int | float)):
            return None
        try:
            return _arith(node.op, left, right)
        except (ZeroDivisionError, OverflowError):
            return None
    if isinstance(node, ast.Tuple | ast.List):
        items = [_const_value(e) for e in node.elts]
        if not items or any(not isinstance(i, int | float) for i in items):
            return None
        numbers = [i for i in items if isinstance(i, int | float)]
        return tuple(numbers) if isinstance(node, ast.Tuple) else numbers
    return None


def _arith(op: ast.operator, left: int | float, right: int | float) -> int | float:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if isinstance(op, ast.FloorDiv):
        return left // right
    if abs(right) > 64:  # Pow: refuse absurd exponents rather than compute them
        raise OverflowError
    result: int | float = left**right
    return result


def module_constants(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound to numeric literals (or arithmetic/tuples of them), last binding wins.

    Handles `a = 1`, `a = b = 1`, `a, b = (1, 2)` and `a = (1, 2)`. Values are ints, floats, tuples or lists.
    """
    found: dict[str, object] = {}
    for stmt in tree.body:
        for name, value in _bindings(stmt):
            found[name] = value
    return found


def _bindings(stmt: ast.stmt) -> list[tuple[str, object]]:
    """The (name, constant value) pairs one module-level assignment binds; [] if it is not a constant."""
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        value = _const_value(stmt.value)
        return [] if value is None else [(stmt.target.id, value)]
    if not isinstance(stmt, ast.Assign):
        return []
    out: list[tuple[str, object]] = []
    for target in stmt.targets:
        if isinstance(target, ast.Name):
            value = _const_value(stmt.value)
            if value is not None:
                out.append((target.id, value))
        elif isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple | ast.List):
            if len(target.elts) == len(stmt.value.elts):
                for elt, val in zip(target.elts, stmt.value.elts, strict=True):
                    single = _const_value(val)
                    if isinstance(elt, ast.Name) and single is not None:
                        out.append((elt.id, single))
    return out


def _literal(value: OverrideValue, like: object) -> ast.expr:
    """An AST literal for an override; a tuple override keeps the original's list/tuple kind."""
    if isinstance(value, tuple):
        elts: list[ast.expr] = [ast.Constant(int(v)) for v in value]
        return (
            ast.List(elts=elts, ctx=ast.Load())
            if isinstance(like, list)
            else ast.Tuple(elts=elts, ctx=ast.Load())
        )
    return ast.Constant(int(value))


def _check_override(name: str, value: OverrideValue, original: object) -> None:
    if isinstance(original, bool) or original is None:
        raise TaskError(f"override {name!r}: the task has no module-level size constant of that name")
    if isinstance(value, tuple):
        if not isinstance(original, tuple | list) or len(original) != len(value):
            raise TaskError(f"override {name!r}={value!r} does not match the task's constant {original!r}")
        if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise TaskError(f"override {name!r}: only integers are allowed, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int) or not isinstance(original, int):
        raise TaskError(f"override {name!r}={value!r} does not match the task's constant {original!r}")


def get_inputs_def(tree: ast.Module) -> ast.FunctionDef | None:
    """The module-level `def get_inputs` that wins (the last one), or None."""
    found = None
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "get_inputs":
            found = stmt
    return found


def _factory_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _int_literals(nodes: list[ast.expr]) -> list[ast.Constant]:
    return [
        n
        for n in nodes
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)
    ]


def _size_arguments(call: ast.Call) -> list[ast.expr]:
    """The expressions of a tensor factory call that give sizes (one per dimension)."""
    name = _factory_name(call)
    if name not in _SIZE_VARARGS and name not in _SIZE_ONLY_TUPLE:
        return []
    keyword = [k.value for k in call.keywords if k.arg == "size"]
    sequences = [a for a in [*call.args, *keyword] if isinstance(a, ast.Tuple | ast.List)]
    if sequences:
        return list(sequences[0].elts)
    if name in _SIZE_VARARGS:
        return [a for a in call.args if not isinstance(a, ast.Starred)]
    return []


def literal_size_nodes(function: ast.FunctionDef) -> list[ast.Constant]:
    """The integer literals among the size arguments of the tensor factories `function` calls, in walk order."""
    nodes: list[ast.Constant] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            nodes.extend(_int_literals(_size_arguments(node)))
    return nodes


def literal_sizes(tree: ast.Module) -> dict[str, int]:
    """`get_inputs#k` -> value for every literal size in `get_inputs` (see the module docstring)."""
    function = get_inputs_def(tree)
    if function is None:
        return {}
    nodes = literal_size_nodes(function)
    return {f"{LITERAL_PREFIX}{k}": n.value for k, n in enumerate(nodes, 1) if isinstance(n.value, int)}


def _rewrite_literals(function: ast.FunctionDef, overrides: Mapping[str, OverrideValue]) -> ast.FunctionDef:
    """A copy of `function` whose addressed literal sizes carry the overridden values."""
    new = copy.deepcopy(function)
    for k, node in enumerate(literal_size_nodes(new), 1):
        value = overrides.get(f"{LITERAL_PREFIX}{k}")
        if isinstance(value, int):
            node.value = value
    return new


def _check_literal_override(name: str, value: OverrideValue, literals: Mapping[str, int]) -> None:
    if name not in literals:
        raise TaskError(f"override {name!r}: the task's get_inputs has no literal size of that number")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskError(f"override {name!r}={value!r}: a literal size takes a positive integer")


def apply_overrides(tree: ast.Module, overrides: Mapping[str, OverrideValue]) -> ast.Module:
    """Return a copy of `tree` where each overridden constant is re-bound right after its assignments, and
    each overridden literal size of `get_inputs` (`get_inputs#k`) is rewritten in place.

    Raises TaskError for a name that is not a module-level integer (or integer tuple) constant nor a literal
    size of `get_inputs`, or a value of the wrong kind, so a typo never silently runs the default size.
    """
    constants = module_constants(tree)
    literals = literal_sizes(tree)
    for name, value in overrides.items():
        if name.startswith(LITERAL_PREFIX):
            _check_literal_override(name, value, literals)
        else:
            _check_override(name, value, constants.get(name))
    rewrite = get_inputs_def(tree) if any(n.startswith(LITERAL_PREFIX) for n in overrides) else None
    body: list[ast.stmt] = []
    for stmt in tree.body:
        body.append(_rewrite_literals(stmt, overrides) if stmt is rewrite and rewrite is not None else stmt)
        for name, _ in _bindings(stmt):
            if name in overrides:
                assign = ast.Assign(
                    targets=[ast.Name(id=name, ctx=ast.Store())],
                    value=_literal(overrides[name], constants[name]),
                )
                body.append(ast.copy_location(assign, stmt))
    new_tree = ast.Module(body=body, type_ignores=[])
    return ast.fix_missing_locations(new_tree)


def load_task_module(
    source: str, name: str, overrides: Mapping[str, OverrideValue] | None = None
) -> types.ModuleType:
    """Execute a task's source in a fresh module (not registered in `sys.modules`) and return it.

    `overrides` maps module-level size constants to new values (ints, or int tuples for tuple/list
    constants). Raises TaskError if the source does not parse, an override names no constant, or the module
    body raises (its exception is chained).
    """
    try:
        tree = ast.parse(source, filename=f"<task {name}>")
    except SyntaxError as e:
        raise TaskError(f"task {name}: syntax error at line {e.lineno}: {e.msg}") from e
    if overrides:
        tree = apply_overrides(tree, overrides)
    filename = f"<task {name}>"
    # Tracebacks from the task's code then show its lines (the error excerpts the runtime records).
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name.replace("/", "."))
    module.__file__ = filename
    try:
        exec(compile(tree, filename, "exec"), module.__dict__)  # noqa: S102 - running the task is the point
    except Exception as e:
        raise TaskError(f"task {name}: module body raised {type(e).__name__}: {e}") from e
    return module
