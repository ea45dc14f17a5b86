"""Triton expressions for the canonical elementwise ops, in fp32, portable across Triton 3.x.

Only `tl.exp`, `tl.log`, `tl.sqrt`, `tl.abs`, `tl.maximum`, `tl.minimum`, `tl.where` and `tl.math.erf` are
used (present in Triton 3.0 and later, on CUDA and under TRITON_INTERPRET=1). Everything else (tanh, sigmoid,
log1p, expm1, softplus, gelu) is a small `@triton.jit` helper emitted into the generated file, so the source
stands alone. The formulas follow PyTorch's own kernels (thresholds, constants, operation order) so results
agree to a few ulp.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.ops import AttrScalar, Const, OpNode, Value, number

__all__ = ["HELPERS", "Emitted", "emit_op", "helper_sources", "render_literal"]

SQRT1_2 = 0.7071067811865476  # 1/sqrt(2): erf-gelu
SQRT_2_OVER_PI = 0.7978845608028654  # sqrt(2/pi): tanh-gelu
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

# name -> (source, names of helpers it calls)
HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "_sigmoid": (
        """@triton.jit
def _sigmoid(x):
    # exp of a non-positive argument never overflows
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))
""",
        (),
    ),
    "_tanh": (
        """@triton.jit
def _tanh(x):
    # exp of a non-positive argument never overflows; near 0 a Taylor series avoids the cancellation in 1 - e.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(x < 0.0, -t, t)
    x2 = x * x
    series = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))))
    return tl.where(tl.abs(x) < 0.1, series, t)
""",
        (),
    ),
    "_log1p": (
        """@triton.jit
def _log1p(u):
    # log(1 + u) accurate for small u: the rounding error of w = 1 + u cancels in log(w) * u / (w - 1).
    w = 1.0 + u
    d = tl.where(w == 1.0, 1.0, w - 1.0)  # no lane divides 0 by 0, even one the where below discards
    return tl.where(w == 1.0, u, tl.log(w) * (u / d))
""",
        (),
    ),
    "_expm1": (
        """@triton.jit
def _expm1(x):
    # exp(x) - 1 for x <= 0, accurate near 0 (Kahan): the rounding error of u = exp(x) cancels in
    # (u - 1) * x / log(u). The guards keep every lane finite (no log(0), no 0 / 0).
    u = tl.exp(x)
    um1 = u - 1.0
    v = tl.where((u == 1.0) | (u == 0.0), 2.0, u)
    r = tl.where(u == 1.0, x, um1 * x / tl.log(v))
    return tl.where(um1 == -1.0, -1.0, r)
""",
        (),
    ),
    "_softplus": (
        """@triton.jit
def _softplus(x, beta, threshold):
    # PyTorch: x when beta * x > threshold, else log1p(exp(beta * x)) / beta (exp capped at the threshold).
    z = x * beta
    return tl.where(z > threshold, x, _log1p(tl.exp(tl.minimum(z, threshold))) / beta)
""",
        ("_log1p",),
    ),
    "_powf": (
        """@triton.jit
def _powf(x, p):
    # x ** p for a run-time exponent, as PyTorch: |x| ** p by exp2 / log2, the sign of an odd integer power,
    # NaN for a negative base and a fractional exponent, and x ** 0 = 1 everywhere.
    r = tl.exp2(p * tl.log2(tl.abs(x)))
    whole = tl.floor(p) == p
    odd = whole & (tl.floor(p * 0.5) * 2.0 != p)
    r = tl.where(x < 0.0, tl.where(whole, tl.where(odd, -r, r), float("nan")), r)
    return tl.where(p == 0.0, 1.0, r)
""",
        (),
    ),
    "_gelu_erf": (
        f"""@triton.jit
def _gelu_erf(x):
    # exact GELU: x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    return 0.5 * x * (1.0 + tl.math.erf(x * {SQRT1_2}))
""",
        (),
    ),
    "_gelu_tanh": (
        f"""@triton.jit
def _gelu_tanh(x):
    # tanh-approximated GELU (approximate="tanh")
    inner = {SQRT_2_OVER_PI} * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + _tanh(inner))
""",
        ("_tanh",),
    ),
}


def helper_sources(names: set[str]) -> list[str]:
    """Sources of the helpers named and those they call, dependencies first, in a stable order."""
    ordered: list[str] = []

    def add(name: str) -> None:
        if name in ordered:
            return
        for dep in HELPERS[name][1]:
            add(dep)
        ordered.append(name)

    for name in sorted(names):
        add(name)
    return [HELPERS[n][0] for n in ordered]


def render_literal(value: float | int) -> str:
    """A Triton (fp32) literal for a Python number."""
    v = float(value)
    if math.isnan(v):
        raise NotApplicable("a NaN constant")
    if math.isinf(v):
        return 'float("inf")' if v > 0 else '-float("inf")'
    return repr(v)


@dataclass(frozen=True)
class Emitted:
    """One op's expression and the helpers it needs."""

    expr: str
    helpers: frozenset[str] = frozenset()


Operand = Callable[[Value], str]  # renders an operand: a variable, a literal or a scalar argument


def emit_op(node: OpNode, render: Operand) -> Emitted:
    """The fp32 expression of an elementwise node. Raises NotApplicable for unsupported arguments."""
    handler = _HANDLERS.get(node.op)
    if handler is None:
        raise NotApplicable(f"no Triton rule for elementwise op {node.op}")
    return handler(node, render)


def _e(expr: str, *helpers: str) -> Emitted:
    return Emitted(expr, frozenset(helpers))


def _unary(template: str, *helpers: str) -> Callable[[OpNode, Operand], Emitted]:
    return lambda node, r: _e(template.format(a=r(node.operands[0])), *helpers)


def _binary(template: str) -> Callable[[OpNode, Operand], Emitted]:
    return lambda node, r: _e(template.format(a=r(node.operands[0]), b=r(node.operands[1])))


def _param(node: OpNode, name: str, render: Operand) -> str:
    value = node.param(name)
    if not isinstance(value, Const | AttrScalar) or number(value) is None:
        raise NotApplicable(f"{node.op}: parameter {name}={value} is not a number")
    return render(value)


def _clamp(node: OpNode, r: Operand) -> Emitted:
    expr = r(node.operands[0])
    bounds = dict(node.params)  # clamp_min / clamp_max bind one bound only: the other is absent
    lo, hi = bounds.get("min", Const(None)), bounds.get("max", Const(None))
    for bound in (lo, hi):
        if isinstance(bound, Const) and bound.value is not None and number(bound) is None:
            raise NotApplicable(f"clamp bound {bound} is not a number (tensor bounds are not supported)")
    if not (isinstance(lo, Const) and lo.value is None):
        expr = f"tl.maximum({expr}, {r(lo)})"
    if not (isinstance(hi, Const) and hi.value is None):
        expr = f"tl.minimum({expr}, {r(hi)})"
    return _e(expr)


def _hardtanh(node: OpNode, r: Operand) -> Emitted:
    a = r(node.operands[0])
    return _e(f"tl.minimum(tl.maximum({a}, {_param(node, 'min_val', r)}), {_param(node, 'max_val', r)})")


def _leaky_relu(node: OpNode, r: Operand) -> Emitted:
    a = r(node.operands[0])
    return _e(f"tl.where({a} > 0.0, {a}, {a} * {_param(node, 'negative_slope', r)})")


def _gelu(node: OpNode, r: Operand) -> Emitted:
    approximate = node.param("approximate")
    a = r(node.operands[0])
    if approximate == Const("none"):
        return _e(f"_gelu_erf({a})", "_gelu_erf")
    if approximate == Const("tanh"):
        return _e(f"_gelu_tanh({a})", "_gelu_tanh")
    raise NotApplicable(f"gelu approximate={approximate}")


def _softplus(node: OpNode, r: Operand) -> Emitted:
    a = r(node.operands[0])
    return _e(f"_softplus({a}, {_param(node, 'beta', r)}, {_param(node, 'threshold', r)})", "_softplus")


def _elu(node: OpNode, r: Operand) -> Emitted:
    a = r(node.operands[0])
    return _e(
        f"tl.where({a} > 0.0, {a}, {_param(node, 'alpha', r)} * _expm1(tl.minimum({a}, 0.0)))", "_expm1"
    )


def _selu(node: OpNode, r: Operand) -> Emitted:
    a = r(node.operands[0])
    return _e(
        f"{SELU_SCALE!r} * tl.where({a} > 0.0, {a}, {SELU_ALPHA!r} * _expm1(tl.minimum({a}, 0.0)))", "_expm1"
    )


def _pow(node: OpNode, r: Operand) -> Emitted:
    base, exponent = node.operands
    if isinstance(base, AttrScalar):
        raise NotApplicable("pow with a module-attribute base (its value could change at run time)")
    if isinstance(exponent, AttrScalar):  # read at run time: the general power
        return _e(f"_powf({r(base)}, {r(exponent)})", "_powf")
    p = number(exponent)
    if p is None:
        c = number(base)
        if c is None or c <= 0:
            raise NotApplicable("pow with a tensor exponent needs a positive constant base")
        return _e(f"tl.exp({r(exponent)} * {render_literal(math.log(c))})")
    a = r(base)
    if float(p) == 0.5:
        return _e(f"tl.sqrt({a})")
    if float(p) != int(p) or abs(int(p)) > 8:  # |a| ** p by exp2 / log2, then the sign PyTorch gives
        power = f"tl.exp2({render_literal(float(p))} * tl.log2(tl.abs({a})))"
        if float(p) != int(p):
            return _e(f'tl.where({a} < 0.0, float("nan"), {power})')
        return _e(f"tl.where({a} < 0.0, -{power}, {power})" if int(p) % 2 else power)
    n = int(p)
    if n == 0:
        return _e(f"({a} * 0.0 + 1.0)")
    product = " * ".join([a] * abs(n))
    return _e(f"({product})" if n > 0 else f"(1.0 / ({product}))")


def _where(node: OpNode, r: Operand) -> Emitted:
    cond, a, b = (r(v) for v in node.operands)
    return _e(f"tl.where({cond}, {a}, {b})")


_HANDLERS: dict[str, Callable[[OpNode, Operand], Emitted]] = {
    "add": _binary("{a} + {b}"),
    "sub": _binary("{a} - {b}"),
    "mul": _binary("{a} * {b}"),
    "truediv": _binary("{a} / {b}"),
    "maximum": _binary("tl.maximum({a}, {b})"),
    "minimum": _binary("tl.minimum({a}, {b})"),
    "max": _binary("tl.maximum({a}, {b})"),
    "min": _binary("tl.minimum({a}, {b})"),
    "gt": _binary("({a} > {b})"),
    "lt": _binary("({a} < {b})"),
    "ge": _binary("({a} >= {b})"),
    "le": _binary("({a} <= {b})"),
    "eq": _binary("({a} == {b})"),
    "ne": _binary("({a} != {b})"),
    "neg": _unary("-{a}"),
    "abs": _unary("tl.abs({a})"),
    "exp": _unary("tl.exp({a})"),
    "log": _unary("tl.log({a})"),
    "log1p": _unary("_log1p({a})", "_log1p"),
    # log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow, no log(0)
    "logsigmoid": _unary("tl.minimum({a}, 0.0) - _log1p(tl.exp(-tl.abs({a})))", "_log1p"),
    "sqrt": _unary("tl.sqrt({a})"),
    "rsqrt": _unary("1.0 / tl.sqrt({a})"),
    "square": _unary("{a} * {a}"),
    "erf": _unary("tl.math.erf({a})"),
    "sigmoid": _unary("_sigmoid({a})", "_sigmoid"),
    "tanh": _unary("_tanh({a})", "_tanh"),
    "relu": _unary("tl.maximum({a}, 0.0)"),
    "relu6": _unary("tl.minimum(tl.maximum({a}, 0.0), 6.0)"),
    "hardswish": _unary("{a} * tl.minimum(tl.maximum({a} + 3.0, 0.0), 6.0) / 6.0"),
    "hardsigmoid": _unary("tl.minimum(tl.maximum({a} + 3.0, 0.0), 6.0) / 6.0"),
    "softsign": _unary("{a} / (1.0 + tl.abs({a}))"),
    "silu": _unary("{a} * _sigmoid({a})", "_sigmoid"),
    "mish": _unary("{a} * _tanh(_softplus({a}, 1.0, 20.0))", "_tanh", "_softplus"),
    "clamp": _clamp,
    "hardtanh": _hardtanh,
    "leaky_relu": _leaky_relu,
    "gelu": _gelu,
    "softplus": _softplus,
    "elu": _elu,
    "selu": _selu,
    "pow": _pow,
    "where": _where,
}
