"""Op tags of a KernelBench-form task, by static analysis (`ast`) of `Model` and the code it reaches.

Nothing is executed. The analysis starts at the `Model` class and follows the module-level classes and
functions it names (ResNet's `Bottleneck`, a helper `_ntuple`...). Module constructors (`nn.Conv2d(...)`)
count wherever they appear; function calls and arithmetic count only outside `__init__` (there they build
constant buffers, not the computation). Tags come from one fixed vocabulary, `VOCABULARY`.
"""

from __future__ import annotations

import ast
import re

from htam_graph.importers.optag_tables import FUNCTION_TAGS, MODULE_TAGS, REDUCTIONS

VOCABULARY: tuple[str, ...] = (
    "matmul", "conv", "conv_transpose", "elementwise", "activation", "reduction", "scan", "softmax", "norm",
    "pooling", "loss", "attention", "rnn", "broadcast", "indexing",
)  # fmt: skip

__all__ = ["VOCABULARY", "op_tags", "op_tags_of_tree"]

_SCALAR_FUNCS = frozenset(
    {"len", "int", "float", "bool", "isinstance", "range", "print", "str", "tuple", "list"}
)
_SHAPE_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "training", "is_cuda"})
_SHAPE_METHODS = frozenset({"size", "dim", "numel", "item", "tolist", "stride", "element_size", "nelement"})
_TUPLE_CALLS = frozenset({"max", "min", "sort", "topk", "kthvalue", "median", "mode", "split", "chunk"})
_BROADCASTERS = frozenset({"unsqueeze", "expand", "expand_as", "broadcast_to"})
_ELEMENTWISE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod)
_LOSS_CLASS = re.compile(r"Loss$")
_MATMULS = frozenset({"matmul", "bmm", "mm", "einsum"})
_TRANSPOSES = frozenset({"transpose", "permute", "t"})


def op_tags(source: str) -> list[str]:
    """Sorted, de-duplicated op tags of a task source; [] when it does not parse or defines no `Model`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return op_tags_of_tree(tree)


def op_tags_of_tree(tree: ast.Module) -> list[str]:
    """Op tags of a parsed task module (see `op_tags`)."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    if not isinstance(defs.get("Model"), ast.ClassDef):
        return []
    torch_aliases = _torch_function_imports(tree)
    tags: set[str] = set()
    for node in _reachable(defs, "Model"):
        if isinstance(node, ast.ClassDef):
            params = _param_attrs(node)
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    tags |= _function_tags(item, params, torch_aliases, is_init=item.name == "__init__")
        else:
            tags |= _function_tags(node, frozenset(), torch_aliases, is_init=False)
    return sorted(tags & set(VOCABULARY))


def _torch_function_imports(tree: ast.Module) -> frozenset[str]:
    """Bare names imported from torch (`from torch.nn.functional import relu`)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            names.update(alias.asname or alias.name for alias in node.names)
    return frozenset(names)


def _reachable(
    defs: dict[str, ast.ClassDef | ast.FunctionDef], start: str
) -> list[ast.ClassDef | ast.FunctionDef]:
    seen: list[str] = []
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in defs or name in {"get_inputs", "get_init_inputs"}:
            continue
        seen.append(name)
        todo.extend(n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs)
    return [defs[n] for n in seen]


def _dotted_tail(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _is_self_attr(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _param_attrs(cls: ast.ClassDef) -> frozenset[str]:
    """`self.X` attributes holding tensors: nn.Parameter(...), torch.* tensors, register_buffer('X', ...)."""
    attrs: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            tail = _dotted_tail(node.value.func)
            is_tensor = tail == "Parameter" or (
                isinstance(node.value.func, ast.Attribute)
                and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id == "torch"
            )
            if is_tensor:
                attrs.update(
                    t.attr for t in node.targets if isinstance(t, ast.Attribute) and _is_self_attr(t)
                )
        if isinstance(node, ast.Call) and _dotted_tail(node.func) == "register_buffer" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                attrs.add(first.value)
    return frozenset(attrs)


class _FunctionScan:
    """Walks one function body in order, tracking which local names hold tensors."""

    def __init__(
        self, fn: ast.FunctionDef, params: frozenset[str], torch_names: frozenset[str], is_init: bool
    ):
        self.params = params
        self.torch_names = torch_names
        self.is_init = is_init
        arg_names = [a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg != "self"]
        self.inputs = frozenset(arg_names)
        self.tensors: set[str] = set(arg_names)
        self.reduced: set[str] = set()  # locals computed by a reduction (for norm patterns)
        self.exps: set[str] = set()  # locals computed by exp (for hand-written softmax)
        self.scores: set[str] = set()  # locals computed from q @ k^T (for hand-written attention)
        self.tags: set[str] = set()

    # ---------------------------------------------------------------- expression classification
    def is_tensor(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.tensors
        if isinstance(node, ast.Attribute):
            if node.attr in _SHAPE_ATTRS:
                return False
            return (_is_self_attr(node) and node.attr in self.params) or self.is_tensor(node.value)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_tensor(node.operand)
        if isinstance(node, ast.Call):
            return self._call_is_tensor(node)
        return False

    def _call_is_tensor(self, node: ast.Call) -> bool:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _SCALAR_FUNCS:
            return False
        if isinstance(func, ast.Attribute):
            if func.attr in _SHAPE_METHODS:
                return False
            if _root_name(func.value) in _TORCH_ROOTS:
                return True
            if self.is_tensor(func.value):
                return True
        return any(self.is_tensor(a) for a in [*node.args, *(k.value for k in node.keywords)])

    def _mentions(self, node: ast.expr, names: set[str], tails: frozenset[str]) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in names:
                return True
            if isinstance(sub, ast.Call) and _dotted_tail(sub.func) in tails:
                return True
        return False

    # ---------------------------------------------------------------- statements and nodes
    def scan(self, body: list[ast.stmt]) -> set[str]:
        for stmt in body:
            self._stmt(stmt)
        return self.tags

    def _stmt(self, stmt: ast.stmt) -> None:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                self._call(node)
            elif not self.is_init:
                self._op_node(node)
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign) and stmt.value is not None:
            self._bind(stmt)
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                self._bind_nested(child)

    def _bind_nested(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign) and stmt.value is not None:
            self._bind(stmt)
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                self._bind_nested(child)

    def _bind(self, stmt: ast.Assign | ast.AugAssign | ast.AnnAssign) -> None:
        assert stmt.value is not None
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        tensor = self.is_tensor(value)
        reduced = self._mentions(value, self.reduced, REDUCTIONS)
        exp = self._mentions(value, self.exps, frozenset({"exp"}))
        score = self._is_scores(value) or self._mentions(value, self.scores, frozenset())
        for target in targets:
            names = [e.id for e in ast.walk(target) if isinstance(e, ast.Name)]
            if isinstance(target, ast.Subscript | ast.Attribute):
                continue
            for name in names:
                (self.tensors.add if tensor else self.tensors.discard)(name)
                (self.reduced.add if reduced and tensor else self.reduced.discard)(name)
                (self.exps.add if exp and tensor else self.exps.discard)(name)
                (self.scores.add if score and tensor else self.scores.discard)(name)

    def _is_scores(self, node: ast.expr) -> bool:
        """An expression holding `a @ b.transpose(...)` (or matmul/bmm of a transposed operand)."""
        for sub in ast.walk(node):
            operands: list[ast.expr] = []
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.MatMult):
                operands = [sub.left, sub.right]
            elif isinstance(sub, ast.Call) and _dotted_tail(sub.func) in _MATMULS:
                operands = list(sub.args)
            if any(_is_transposed(o) for o in operands):
                return True
        return False

    def _attention_matmul(self, operands: list[ast.expr]) -> None:
        """A matmul consuming q @ k^T scores (after softmax, relu, masking...) is attention."""
        if any(self._mentions(o, self.scores, frozenset()) for o in operands):
            self.tags.add("attention")

    def _call(self, node: ast.Call) -> None:
        tail = _dotted_tail(node.func)
        if tail is None or _is_self_attr(node.func):
            return  # self.conv(x): a submodule, tagged where it was constructed
        if tail in MODULE_TAGS:
            self.tags |= MODULE_TAGS[tail]
        elif _LOSS_CLASS.search(tail) and tail[:1].isupper():
            self.tags.add("loss")
        if self.is_init or tail[:1].isupper():
            return
        if isinstance(node.func, ast.Name) and node.func.id not in self.torch_names:
            return  # a builtin (sum, max) or a local helper
        name = tail.rstrip("_")
        if name in {"max", "min"}:
            two_tensors = len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant)
            if isinstance(node.func, ast.Attribute) and self.is_tensor(node.func.value):
                two_tensors = len(node.args) >= 1 and self.is_tensor(node.args[0])
            self.tags.add("elementwise" if two_tensors else "reduction")
        elif name in FUNCTION_TAGS:
            self.tags |= FUNCTION_TAGS[name]
        if name in _MATMULS:
            self._attention_matmul(list(node.args))
        if name in {"mean", "sum"} and not self._has_dim(node):
            self._loss_pattern(node)

    @staticmethod
    def _has_dim(node: ast.Call) -> bool:
        positional = node.args[1:] if _is_torch_call(node) else node.args
        return bool(positional) or any(k.arg in {"dim", "axis"} for k in node.keywords)

    def _loss_pattern(self, node: ast.Call) -> None:
        """A full mean/sum over an expression of two or more forward inputs (hand-written MSE, hinge...)."""
        args: list[ast.expr] = list(node.args[:1])
        if isinstance(node.func, ast.Attribute) and not _is_torch_call(node):
            args = [node.func.value]
        used = {n.id for a in args for n in ast.walk(a) if isinstance(n, ast.Name) and n.id in self.inputs}
        if len(used) >= 2:
            self.tags.add("loss")

    def _op_node(self, node: ast.AST) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            self.tags.add("matmul")
            self._attention_matmul([node.left, node.right])
        elif isinstance(node, ast.BinOp) and isinstance(node.op, _ELEMENTWISE_OPS):
            self._arith(node.left, node.right, node.op)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _ELEMENTWISE_OPS):
            self._arith(node.target, node.value, node.op)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and self.is_tensor(node.operand):
            self.tags.add("elementwise")
        elif (
            isinstance(node, ast.Subscript)
            and not isinstance(node.value, ast.Call)
            and self.is_tensor(node.value)
        ):
            if not (isinstance(node.value, ast.Attribute) and node.value.attr in _SHAPE_ATTRS):
                self.tags.add("indexing")

    def _arith(self, left: ast.expr, right: ast.expr, op: ast.operator) -> None:
        if not (self.is_tensor(left) or self.is_tensor(right)):
            return
        self.tags.add("elementwise")
        if any(self._broadcasts(side) for side in (left, right)):
            self.tags.add("broadcast")
        if (
            isinstance(op, ast.Div)
            and self._mentions(right, set(), frozenset({"abs"}))
            and not self._mentions(right, self.reduced, REDUCTIONS)
        ):
            self.tags.add("activation")  # x / (1 + |x|): softsign written out
        if isinstance(op, ast.Div | ast.Mult) and self._mentions(right, self.reduced, REDUCTIONS | {"rsqrt"}):
            if isinstance(op, ast.Div) or self._mentions(right, set(), frozenset({"rsqrt"})):
                exp = self._mentions(left, self.exps, frozenset({"exp"}))
                self.tags.add("softmax" if exp else "norm")

    def _broadcasts(self, node: ast.expr) -> bool:
        if _is_self_attr(node) and isinstance(node, ast.Attribute) and node.attr in self.params:
            return True
        if isinstance(node, ast.Call) and _dotted_tail(node.func) in _BROADCASTERS:
            return True
        if isinstance(node, ast.Subscript):
            index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return any(isinstance(i, ast.Constant) and i.value is None for i in index)
        return False


_TORCH_ROOTS = frozenset({"torch", "F", "nn"})


def _is_transposed(node: ast.expr) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _dotted_tail(sub.func) in _TRANSPOSES:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in {"mT", "T"}:
            return True
    return False


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_torch_call(node: ast.Call) -> bool:
    """`torch.mean(x)`, `F.relu(x)`, `torch.nn.functional.gelu(x)` (not a method call on a tensor)."""
    return isinstance(node.func, ast.Attribute) and _root_name(node.func.value) in _TORCH_ROOTS


def _function_tags(
    fn: ast.FunctionDef, params: frozenset[str], torch_names: frozenset[str], is_init: bool
) -> set[str]:
    return _FunctionScan(fn, params, torch_names, is_init).scan(fn.body)
