"""Source text of reduction_structure.block_scan: the rows kernel (scan dim last), the columns kernel (scan
dim strided) and their launcher, for a `ScanPlan` (see block_scan.py for the method)."""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.codegen.triton_math import emit_op, helper_sources, render_literal
from htam_graph.rules.ops import AttrScalar, Ref, Value, number
from htam_graph.rules.recipes.scans.plan import ScanPlan

__all__ = ["columns_kernel", "kernel_helpers", "launcher", "rows_kernel"]

_IDENTITY = {"cumsum": "0.0", "cumprod": "1.0"}

# The product combine function of tl.associative_scan / tl.reduce for cumprod.
_COMBINE = """@triton.jit
def _multiply(a, b):
    return a * b
"""


def _ops(op: str, axis: int) -> tuple[str, str]:
    """(scan expression, chunk total expression) of `v` along `axis`."""
    if op == "cumsum":
        return f"tl.cumsum(v, axis={axis})", f"tl.sum(v, axis={axis})"
    return f"tl.associative_scan(v, {axis}, _multiply)", f"tl.reduce(v, {axis}, _multiply)"


def _carry_update(op: str) -> str:
    return "carry + " if op == "cumsum" else "carry * "


_KERNEL_NAMES = (
    "row base carry start offs src src_at dst_at v valid result pid n_col_blocks outer cols mask "
    "length inner "
    "out dim block_i block_l grid index_64 math"
).split()


def _arg_names(plan: ScanPlan) -> dict[str, str]:
    taken = set(_KERNEL_NAMES)
    return {ref: identifier(ref, taken) for ref in plan.tensors}


def _value_lines(plan: ScanPlan, index: str) -> tuple[list[str], set[str]]:
    """Load every tensor at `index` (masked by `valid`), apply the prologue, leave the scanned value in `v`;
    with the helper names the prologue calls."""
    args = _arg_names(plan)
    lines = [f"{a} = tl.load({a}_ptr + {index}, mask=valid, other=0).to(tl.float32)" for a in args.values()]
    variables = dict(args)
    taken = set(_KERNEL_NAMES) | set(args.values())

    def render(value: Value) -> str:
        if isinstance(value, Ref):
            return variables[value.name]
        if number(value) is not None and not isinstance(value, AttrScalar):
            return render_literal(number(value))  # type: ignore[arg-type]
        raise NotApplicable(f"unsupported operand {value} in the scan prologue")

    helpers: set[str] = set()
    for node in plan.pre:
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        variables[node.name] = identifier(f"v_{node.name}", taken)
        lines.append(f"{variables[node.name]} = {emitted.expr}  # {node.op} ({node.origin})")
    value = variables[plan.pre[-1].name] if plan.pre else args[plan.source]
    lines.append(f"v = tl.where(valid, {value}, {_IDENTITY[plan.op]})  # outside the row: the identity")
    return lines, helpers


def _pointer_params(plan: ScanPlan) -> str:
    return ", ".join(f"{a}_ptr" for a in _arg_names(plan).values())


# One program per row (scan dim last, contiguous): the row in BLOCK chunks, each scanned as a tree and added
# to the carried scan of the earlier chunks.
_ROWS_KERNEL = '''\
@triton.jit
def ${name}_rows_kernel(
    $pointers, out_ptr, length,
    SHIFT: tl.constexpr, REVERSE: tl.constexpr, BLOCK: tl.constexpr, INDEX_64: tl.constexpr,
):
    """One program per row (scan dim last, contiguous); SHIFT = 1: exclusive; REVERSE: from the row's end."""
    row = tl.program_id(0)
    if INDEX_64:  # 2**31 elements or more: 64-bit offsets
        row = row.to(tl.int64)
    base = row * length
    carry = tl.full([], $identity, tl.float32)  # the scan of every earlier chunk
    for start in range(0, length, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        src = offs - SHIFT
        if REVERSE:  # position j of the scan order is element length - 1 - j
            src_at, dst_at = length - 1 - src, length - 1 - offs
        else:
            src_at, dst_at = src, offs
        valid = (offs < length) & (src >= 0)
        $loads
        result = $combine$scan
        tl.store(out_ptr + base + dst_at, result.to(out_ptr.dtype.element_ty), mask=offs < length)
        carry = $combine$total
'''

# The scan dim strided by `inner`: a program owns BLOCK_I contiguous columns of one outer index and walks
# the scan dim in [BLOCK_L, BLOCK_I] tiles.
_COLUMNS_KERNEL = '''\
@triton.jit
def ${name}_columns_kernel(
    $pointers, out_ptr, length, inner,
    SHIFT: tl.constexpr, REVERSE: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_I: tl.constexpr, \
INDEX_64: tl.constexpr,
):
    """Scan dim strided by `inner`: a program owns BLOCK_I contiguous columns of one outer index."""
    pid = tl.program_id(0)
    n_col_blocks = tl.cdiv(inner, BLOCK_I)
    outer = pid // n_col_blocks
    if INDEX_64:
        outer = outer.to(tl.int64)
    base = outer * length * inner
    cols = (pid % n_col_blocks) * BLOCK_I + tl.arange(0, BLOCK_I)[None, :]
    carry = tl.full([1, BLOCK_I], $identity, tl.float32)
    for start in range(0, length, BLOCK_L):
        offs = start + tl.arange(0, BLOCK_L)[:, None]
        if INDEX_64:  # src * inner may pass 2**31
            offs = offs.to(tl.int64)
        src = offs - SHIFT
        mask = (offs < length) & (cols < inner)
        if REVERSE:
            src_at, dst_at = length - 1 - src, length - 1 - offs
        else:
            src_at, dst_at = src, offs
        valid = mask & (src >= 0)
        $loads
        result = $combine$scan
        tl.store(out_ptr + base + dst_at * inner + cols, result.to(out_ptr.dtype.element_ty), mask=mask)
        carry = $combine$total[None, :]
'''


def _kernel(plan: ScanPlan, kernel: str, index: str) -> str:
    """One of the two kernels, its chunk loads at `index` (the rows or the columns layout)."""
    scan, total = _ops(plan.op, 0)
    return template.fill(
        kernel,
        name=plan.name,
        pointers=_pointer_params(plan),
        identity=_IDENTITY[plan.op],
        loads=_value_lines(plan, index)[0],
        combine=_carry_update(plan.op),
        scan=scan,
        total=total,
    )


def rows_kernel(plan: ScanPlan) -> str:
    return _kernel(plan, _ROWS_KERNEL, "base + src_at")


def columns_kernel(plan: ScanPlan) -> str:
    return _kernel(plan, _COLUMNS_KERNEL, "base + src_at * inner + cols")


# The launcher: operand checks, the [outer, length, inner] view, the rows kernel (inner == 1) or the columns
# kernel.
_LAUNCHER = '''\
def $name($signature, dim: int) -> torch.Tensor:
    """$form $op along dim ($x's shape and dtype)."""
    if $x.dim() == 0:
        raise ValueError("$op of a 0-d tensor")
    dim = dim % $x.dim()
    $x = $x.contiguous()
    $checks
    out = torch.empty_like($x)
    if out.numel() == 0:
        return out
    length = $x.shape[dim]
    outer, inner = math.prod($x.shape[:dim]), math.prod($x.shape[dim + 1 :])
    index_64 = $x.numel() + BLOCK * max(inner, 1) > 2**31 - 1
    if inner == 1:
        ${name}_rows_kernel[(outer,)](
            $tensors, out, length, $flags, BLOCK=BLOCK, INDEX_64=index_64, num_warps=NUM_WARPS
        )
        return out
    block_i = min(triton.next_power_of_2(inner), MAX_BLOCK_I)
    block_l = max(BLOCK // block_i, 1)
    grid = (outer * triton.cdiv(inner, block_i),)
    ${name}_columns_kernel[grid](
        $tensors, out, length, inner, $flags, BLOCK_L=block_l, BLOCK_I=block_i, INDEX_64=index_64,
        num_warps=NUM_WARPS,
    )
    return out
'''

# A further operand (a prologue's mask, say) must have the scanned input's shape.
_OPERAND_CHECK = """\
if $t.shape != $x.shape:
    raise ValueError(f"$t has shape {tuple($t.shape)}, expected {tuple($x.shape)}")
$t = $t.contiguous()
"""


def launcher(plan: ScanPlan) -> str:
    names = list(_arg_names(plan).values())
    x = names[0]
    return template.fill(
        _LAUNCHER,
        name=plan.name,
        signature=", ".join(f"{t}: torch.Tensor" for t in names),
        form=("Exclusive" if plan.exclusive else "Inclusive") + (" reverse" if plan.reverse else ""),
        op=plan.op,
        x=x,
        checks=[template.fill(_OPERAND_CHECK, t=t, x=x) for t in names[1:]],
        tensors=", ".join(names),
        flags=f"SHIFT={1 if plan.exclusive else 0}, REVERSE={plan.reverse}",
    )


def kernel_helpers(plan: ScanPlan) -> list[str]:
    """The triton_math helpers the prologue calls, and the product's combine function for cumprod."""
    return helper_sources(_value_lines(plan, "")[1]) + ([_COMBINE] if plan.op == "cumprod" else [])
