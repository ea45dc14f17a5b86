"""reduction_structure.block_scan: cumsum / cumprod along any dim, inclusive or exclusive, in fp32.

Applies to a forward that is one `torch.cumsum` / `torch.cumprod` of an input, or the exclusive-cumsum pattern
`cat((zeros_like(x.select(d, 0).unsqueeze(d)), cumsum(x.narrow(d, 0, x.size(d) - 1), d)), d)`, which is proved
structurally (every node, dim and the narrow length are checked), so it holds at every size: the result is an
exclusive scan of x along d with x's shape. `flip(scan(flip(x, d), d), d)` is proved a reverse scan.

The input is viewed as [outer, length, inner]. inner == 1 (scan along the last dim): one program per row walks
the row in BLOCK chunks, scans each chunk with tl.cumsum / tl.associative_scan and adds the carried prefix of
the earlier chunks. inner > 1: each program owns BLOCK_I contiguous columns of one outer index (coalesced) and
walks the scan dim in [BLOCK_L, BLOCK_I] tiles. Exclusive: element j reads x[j - 1] (the identity at j = 0),
so each input byte is still read once. Reverse: scan position j is element length - 1 - j. Each chunk is
scanned as a tree, not sequentially like PyTorch's CPU loop: long fp32 cumsums differ in rounding (checked
at rtol=atol=1e-4 on the dev tasks' default sizes by tests/gpu/test_rules_library_loss_scan_gpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.fused_elementwise import identifier
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import emit_op, helper_sources, render_literal
from htam_graph.rules.ops import AttrScalar, Const, OpGraph, OpKind, OpNode, Ref, Value, number

KEY = "reduction_structure.block_scan"
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
_IDENTITY = {"cumsum": "0.0", "cumprod": "1.0"}


@dataclass(frozen=True)
class ScanPlan:
    (
        """`op` (cumsum / cumprod) along `dim` of `source`, """
        """or of `pre` (elementwise ops on same-shaped inputs)."""
    )

    op: str
    source: str  # the input the scan reads (the first tensor input of the prologue when there is one)
    dim: Value
    exclusive: bool
    reverse: bool = False  # scan from the end of the dim (flip(scan(flip(x, d), d), d))
    pre: tuple[OpNode, ...] = ()  # inclusive scans only: elementwise ops computing the scanned values
    leaves: tuple[str, ...] = ()  # every tensor the kernel loads (source first)

    @property
    def tensors(self) -> tuple[str, ...]:
        return self.leaves or (self.source,)

    @property
    def name(self) -> str:
        return ("exclusive_" if self.exclusive else "") + ("reverse_" if self.reverse else "") + self.op


def plan_scan(graph: OpGraph) -> ScanPlan:
    """The plan for `graph`, or NotApplicable with the reason."""
    scans = [n for n in graph.nodes if n.kind is OpKind.SCAN]
    if len(scans) != 1:
        raise NotApplicable(f"the forward needs exactly one cumsum/cumprod (found {len(scans)})")
    scan = scans[0]
    if len(graph.nodes) == 1 and graph.output.name == scan.name:
        plan = ScanPlan(scan.op, _input_name(graph, scan.operands[0], scan.op), scan.param("dim"), False)
    elif graph.output.name == scan.name:
        plan = _prologue_plan(graph, scan)
    elif graph.nodes[-1].op == "flip":
        plan = _reverse_plan(graph, scan)
    else:
        plan = _exclusive_plan(graph, scan)
    info = graph.tensor(plan.source)
    if info is None or info.dtype not in _FLOAT_DTYPES:
        raise NotApplicable(f"{plan.op} of a non-float tensor (integer scans change dtype)")
    if not info.shape:
        raise NotApplicable(f"{plan.op} of a 0-d tensor")
    return plan


def _prologue_plan(graph: OpGraph, scan: OpNode) -> ScanPlan:
    """An inclusive scan of elementwise ops on inputs of the scan's shape (e.g. cumsum(x * mask))."""
    pre = graph.nodes[:-1]
    for node in pre:
        if node.kind is not OpKind.ELEMENTWISE or node.shape != scan.shape:
            raise NotApplicable(f"{node.op} before {scan.op} is not elementwise on the scanned shape")
    if scan.operands[0] != Ref(pre[-1].name):
        raise NotApplicable(f"{scan.op} does not read the last elementwise op")
    leaves: list[str] = []
    for node in pre:
        for value in (*node.operands, *(v for _, v in node.params)):
            if isinstance(value, AttrScalar):
                raise NotApplicable(
                    f"{node.op} reads the module attribute {value.path} (not fused into a scan)"
                )
            if isinstance(value, Ref) and graph.node(value.name) is None and value.name not in leaves:
                info = graph.tensor(value.name)
                if (
                    info is None
                    or info.shape != scan.shape
                    or info.dtype not in (*_FLOAT_DTYPES, "torch.bool")
                ):
                    raise NotApplicable(f"{value.name} is not a float/bool input of the scanned shape")
                leaves.append(value.name)
    floats = [n for n in leaves if graph.tensor(n).dtype in _FLOAT_DTYPES]  # type: ignore[union-attr]
    if not floats or scan.dtype != graph.tensor(floats[0]).dtype:  # type: ignore[union-attr]
        raise NotApplicable(f"{scan.op} does not keep the dtype of its first float input")
    ordered = (floats[0], *(n for n in leaves if n != floats[0]))
    return ScanPlan(scan.op, floats[0], scan.param("dim"), False, pre=pre, leaves=ordered)


def _input_name(graph: OpGraph, value: Value, what: str) -> str:
    if not isinstance(value, Ref) or graph.tensor(value.name) is None:
        raise NotApplicable(f"{what} reads {value}, not a forward input or parameter")
    return value.name


def _exclusive_plan(graph: OpGraph, scan: OpNode) -> ScanPlan:
    """Prove the cat(zeros, cumsum(narrow)) exclusive-scan pattern node by node (see the module docstring)."""
    out = graph.node(graph.output.name)
    if out is None or out.op != "cat" or len(out.operands) != 2:
        raise NotApplicable(
            f"the ops around {scan.op} are neither the exclusive cat(zeros, cumsum(narrow)) nor the reverse "
            "flip(scan(flip)) pattern"
        )
    dim = out.param("dim")
    zeros, scanned = (_node(graph, v) for v in out.operands)
    if scanned is not scan or scan.op != "cumsum" or scan.param("dim") != dim:
        raise NotApplicable("cat's second operand is not a cumsum along cat's dim")
    narrow = _node(graph, scan.operands[0])
    x = _input_name(graph, narrow.operands[0] if narrow.op == "narrow" else Const(None), "narrow")
    if narrow.param("dim") != dim or number(narrow.param("start")) != 0:
        raise NotApplicable("the scanned slice is not x.narrow(dim, 0, ...) along the scan dim")
    length = _node(graph, narrow.param("length"))
    size = _node(graph, length.operands[0]) if length.op == "int_sub" else None
    if size is None or length.operands[1] != Const(1) or size.op != "size":
        raise NotApplicable("the narrow length is not x.size(dim) - 1")
    if size.operands[0] != Ref(x) or size.param("dim") != dim:
        raise NotApplicable("the narrow length is the size of another tensor or dim")
    if zeros.op != "zeros_like":
        raise NotApplicable("cat's first operand is not zeros_like(...)")
    piece = _node(graph, zeros.operands[0])
    select = _node(graph, piece.operands[0]) if piece.op == "unsqueeze" else None
    if select is None or piece.param("dim") != dim or select.op != "select" or select.param("dim") != dim:
        raise NotApplicable("the zeros are not shaped like x.select(dim, i).unsqueeze(dim)")
    if select.operands[0] != Ref(x):
        raise NotApplicable("the zeros are shaped from another tensor")
    used = {n.name for n in (out, zeros, piece, select, scan, narrow, length, size)}
    if used != {n.name for n in graph.nodes}:
        raise NotApplicable("the forward computes more than the exclusive scan")
    if graph.shape_of(out.name) != graph.shape_of(x):
        raise NotApplicable("the concatenated result does not have x's shape")
    return ScanPlan("cumsum", x, dim, True)


def _reverse_plan(graph: OpGraph, scan: OpNode) -> ScanPlan:
    """flip(scan(flip(x, d), d), d) is the scan of x from the end of d (x's shape, same elements)."""
    out = graph.node(graph.output.name)
    inner = _node(graph, scan.operands[0])
    if out is None or len(graph.nodes) != 3 or out.operands[0] != Ref(scan.name) or inner.op != "flip":
        raise NotApplicable("flip around the scan is not exactly flip(scan(flip(x, d), d), d)")
    dim = scan.param("dim")
    if _flip_dim(out) != dim or _flip_dim(inner) != dim:
        raise NotApplicable("the flips are not along the scan dim (only a single-dim flip is a reverse scan)")
    return ScanPlan(scan.op, _input_name(graph, inner.operands[0], "flip"), dim, False, reverse=True)


def _flip_dim(node: OpNode) -> Value:
    dims = node.param("dims")
    if isinstance(dims, Const) and isinstance(dims.value, tuple):
        return Const(dims.value[0]) if len(dims.value) == 1 else Const(None)
    return dims


def _node(graph: OpGraph, value: Value) -> OpNode:
    node = graph.node(value.name) if isinstance(value, Ref) else None
    if node is None:
        raise NotApplicable(f"{value} is not computed by the forward")
    return node


class BlockScan(PlannedRecipe[ScanPlan]):
    """Recipe for `reduction_structure.block_scan`."""

    key = KEY
    default_config = KernelConfig(block=2048, num_warps=8)

    def plan(self, view: TaskView) -> ScanPlan:
        return plan_scan(view.graph)

    def render(self, view: TaskView, plan: ScanPlan, config: KernelConfig) -> str:
        tensors = [_forward_expr(view, ref) for ref in plan.tensors]
        helpers = helper_sources(_value_lines(plan, "")[1]) + ([_COMBINE] if plan.op == "cumprod" else [])
        dim = f"int(self.{plan.dim.path})" if isinstance(plan.dim, AttrScalar) else repr(number(plan.dim))
        form = ("exclusive" if plan.exclusive else "inclusive") + (" reverse" if plan.reverse else "")
        parts = SourceParts(
            recipe_key=self.key,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{form} {plan.op} along dim {dim}: one pass, chunked tree scan + carried prefix in fp32.",
                "Each chunk is scanned as a tree (PyTorch's CPU loop is sequential): rounding differs "
                "slightly.",
            ),
            constants=(
                f"BLOCK = {config.block}  # elements per chunk (BLOCK_L x BLOCK_I tiles when the scan "
                "dim is strided)",
                f"NUM_WARPS = {config.num_warps}",
                "MAX_BLOCK_I = 64  # contiguous columns per program when the scan dim is not the last",
            ),
            helpers=tuple(helpers),
            kernels=(_rows_kernel(plan), _columns_kernel(plan)),
            launchers=(_launcher(plan),),
            class_doc=f"{form} {plan.op} along one dim as a chunked Triton scan.",
            forward_body=(f"return {plan.name}({', '.join(tensors)}, {dim})",),
        )
        return render_file(parts, view.skeleton)


def _forward_expr(view: TaskView, ref: str) -> str:
    info = view.graph.tensor(ref)
    return ref if info is not None and info.kind == "input" else f"self.{ref}"


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
    (
        """Load every tensor at `index` (masked by `valid`), apply the prologue, """
        """leave the scanned value in `v`."""
    )
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


def _rows_kernel(plan: ScanPlan) -> str:
    scan, total = _ops(plan.op, 0)
    ident, comb = _IDENTITY[plan.op], _carry_update(plan.op)
    loads = "\n".join("        " + line for line in _value_lines(plan, "base + src_at")[0])
    return f'''@triton.jit
def {plan.name}_rows_kernel(
    {_pointer_params(plan)}, out_ptr, length,
    SHIFT: tl.constexpr, REVERSE: tl.constexpr, BLOCK: tl.constexpr, INDEX_64: tl.constexpr,
):
    """One program per row (scan dim last, contiguous); SHIFT = 1: exclusive; REVERSE: from the row's end."""
    row = tl.program_id(0)
    if INDEX_64:  # 2**31 elements or more: 64-bit offsets
        row = row.to(tl.int64)
    base = row * length
    carry = tl.full([], {ident}, tl.float32)  # the scan of every earlier chunk
    for start in range(0, length, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        src = offs - SHIFT
        if REVERSE:  # position j of the scan order is element length - 1 - j
            src_at, dst_at = length - 1 - src, length - 1 - offs
        else:
            src_at, dst_at = src, offs
        valid = (offs < length) & (src >= 0)
{loads}
        result = {comb}{scan}
        tl.store(out_ptr + base + dst_at, result.to(out_ptr.dtype.element_ty), mask=offs < length)
        carry = {comb}{total}
'''


def _columns_kernel(plan: ScanPlan) -> str:
    scan, total = _ops(plan.op, 0)
    ident, comb = _IDENTITY[plan.op], _carry_update(plan.op)
    total = f"{total}[None, :]"
    loads = "\n".join("        " + line for line in _value_lines(plan, "base + src_at * inner + cols")[0])
    return f'''@triton.jit
def {plan.name}_columns_kernel(
    {_pointer_params(plan)}, out_ptr, length, inner,
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
    carry = tl.full([1, BLOCK_I], {ident}, tl.float32)
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
{loads}
        result = {comb}{scan}
        tl.store(out_ptr + base + dst_at * inner + cols, result.to(out_ptr.dtype.element_ty), mask=mask)
        carry = {comb}{total}
'''


def _launcher(plan: ScanPlan) -> str:
    shift = 1 if plan.exclusive else 0
    flags = f"SHIFT={shift}, REVERSE={plan.reverse}"
    names = list(_arg_names(plan).values())
    x, tensors = names[0], ", ".join(names)
    form = ("Exclusive" if plan.exclusive else "Inclusive") + (" reverse" if plan.reverse else "")
    checks = "".join(
        f"    if {t}.shape != {x}.shape:\n"
        f'        raise ValueError(f"{t} has shape {{tuple({t}.shape)}}, expected {{tuple({x}.shape)}}")\n'
        f"    {t} = {t}.contiguous()\n"
        for t in names[1:]
    )
    return f'''def {plan.name}({", ".join(f"{t}: torch.Tensor" for t in names)}, dim: int) -> torch.Tensor:
    """{form} {plan.op} along dim ({x}'s shape and dtype)."""
    if {x}.dim() == 0:
        raise ValueError("{plan.op} of a 0-d tensor")
    dim = dim % {x}.dim()
    {x} = {x}.contiguous()
{checks}    out = torch.empty_like({x})
    if out.numel() == 0:
        return out
    length = {x}.shape[dim]
    outer, inner = math.prod({x}.shape[:dim]), math.prod({x}.shape[dim + 1 :])
    index_64 = {x}.numel() + BLOCK * max(inner, 1) > 2**31 - 1
    if inner == 1:
        {plan.name}_rows_kernel[(outer,)](
            {tensors}, out, length, {flags}, BLOCK=BLOCK, INDEX_64=index_64, num_warps=NUM_WARPS
        )
        return out
    block_i = min(triton.next_power_of_2(inner), MAX_BLOCK_I)
    block_l = max(BLOCK // block_i, 1)
    grid = (outer * triton.cdiv(inner, block_i),)
    {plan.name}_columns_kernel[grid](
        {tensors}, out, length, inner, {flags}, BLOCK_L=block_l, BLOCK_I=block_i, INDEX_64=index_64,
        num_warps=NUM_WARPS,
    )
    return out
'''
