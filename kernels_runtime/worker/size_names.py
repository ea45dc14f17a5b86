"""Which module-level constants and `get_inputs` literals of a task are sizes a smoke variant may shrink.

A constant is a size when its name is (batch_size, in_features, dim...), not a hyper-parameter (eps, scale,
dropout...); a structural size (kernel, stride, padding, groups...) is kept. A literal inside `get_inputs`'s
tensor sizes is scalable unless the same value is written elsewhere in the task (a channel count tied to
`__init__`)."""

from __future__ import annotations

import ast

from htam_graph.errors import TaskError
from htam_graph.kernels_runtime.worker.taskmod import (
    get_inputs_def,
    literal_size_nodes,
    literal_sizes,
    module_constants,
)

__all__ = ["FLOOR", "is_batch", "is_structural", "scalable_literals", "sequence_constants", "size_constants"]

NON_SIZE_TOKENS = frozenset(
    "eps slope scale scaling p dropout pdrop drop value multiplier divisor factor momentum constant seed prob "
    "alpha beta temperature clamp min max".split()
)
SIZE_WORDS = frozenset("seqlen len length size sizes features dim channels tokens positions".split())
STRUCTURAL_TOKENS = frozenset(
    "kernel stride strides padding dilation groups group heads head pool maxpool block window".split()
)
FLOOR = 8  # scalable sizes are never shrunk below this (or below their own value)


def _tokens(name: str) -> list[str]:
    return [t for t in name.lower().split("_") if t]


def _is_size_name(name: str) -> bool:
    tokens = set(_tokens(name))
    hit = tokens & NON_SIZE_TOKENS
    if hit <= {"min", "max"} and hit and tokens & SIZE_WORDS:
        return True
    return not hit


def is_structural(name: str) -> bool:
    return bool(set(_tokens(name)) & STRUCTURAL_TOKENS)


def is_batch(name: str) -> bool:
    return "batch" in _tokens(name)


def _constants(source: str) -> dict[str, object]:
    try:
        constants: dict[str, object] = module_constants(ast.parse(source))
    except SyntaxError as e:
        raise TaskError(f"task source does not parse (line {e.lineno}): {e.msg}") from e
    return constants


def size_constants(source: str) -> dict[str, int]:
    """Module-level integer constants that look like sizes (see the module docstring for the heuristic)."""
    out: dict[str, int] = {}
    for name, value in _constants(source).items():
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1 and _is_size_name(name):
            out[name] = value
    return out


def sequence_constants(source: str) -> dict[str, tuple[int, ...]]:
    """Module-level tuple/list constants of positive integers that look like sizes (`input_shape = (32768,)`)."""
    out: dict[str, tuple[int, ...]] = {}
    for name, value in _constants(source).items():
        if isinstance(value, tuple | list) and _is_size_name(name):
            if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
                out[name] = tuple(int(v) for v in value)
    return out


def scalable_literals(source: str) -> dict[str, int]:
    """`get_inputs#k` -> value for the literal sizes of `get_inputs` above FLOOR that nothing else repeats."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TaskError(f"task source does not parse (line {e.lineno}): {e.msg}") from e
    function = get_inputs_def(tree)
    if function is None:
        return {}
    own = {id(n) for n in literal_size_nodes(function)}
    elsewhere = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and id(node) not in own
    }
    elsewhere |= {v for v in module_constants(tree).values() if isinstance(v, int)}
    return {k: v for k, v in literal_sizes(tree).items() if v > FLOOR and v not in elsewhere}
