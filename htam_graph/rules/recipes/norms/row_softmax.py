"""reduction_structure.row_softmax: softmax / log_softmax over the last dimension, one program per row.

Rows that fit in registers (next power of two <= `max_single_block`) are read once: max, sum of exp, write.
Longer rows (KernelBench's are 393216 wide) use a looped online softmax: pass 1 keeps a running max and a
rescaled running sum per lane over BLOCK-wide chunks, pass 2 re-reads the row and writes the result. Both
kernels are in every generated file; the launcher picks one from the row length at run time. fp32 throughout.
"""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.ops import AttrScalar, OpKind, OpNode, Ref, number

KEY = "reduction_structure.row_softmax"
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")

# Rows that fit in registers: read once; max, sum of exp, write.
_SINGLE = '''\
@triton.jit
def ${name}_row_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """One program per row, the whole row in registers (BLOCK >= n_cols): max, sum of exp, write."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    row_max = tl.max(x, axis=0)
    shifted = x - row_max  # <= 0: exp never overflows
    numerator = tl.exp(shifted)  # masked lanes: exp(-inf) = 0
    denominator = tl.sum(numerator, axis=0)
    result = $single_result
    tl.store(out_ptr + row * n_cols + cols, result.to(out_ptr.dtype.element_ty), mask=mask)
'''

# Longer rows: an online max / rescaled sum pass over BLOCK-wide chunks, then a write pass.
_LOOPED = '''\
@triton.jit
def ${name}_row_looped_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """One program per row, for rows longer than a register block: online max/sum pass, then a write pass."""
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    lanes = tl.arange(0, BLOCK)
    # Pass 1: per lane, the running max m and the sum s of exp(x - m), rescaled whenever m grows.
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # a lane that has seen only -inf subtracts 0 instead of -inf (no inf - inf = NaN); its s stays 0
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - m_ref) + tl.exp(x - m_ref)
        m = m_new
    row_max = tl.max(m, axis=0)
    denominator = tl.sum(s * tl.exp(m - row_max), axis=0)
    log_denominator = tl.log(denominator)
    # Pass 2: re-read the row and write the result.
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        shifted = x - row_max
        result = $looped_result
        tl.store(out_ptr + base + cols, result.to(out_ptr.dtype.element_ty), mask=mask)
'''

# The launcher picks the kernel from the row length at run time.
_LAUNCHER = '''\
def ${name}_rows(x: torch.Tensor) -> torch.Tensor:
    """$op over the last dimension of x, one program per row (row length read at run time)."""
    x = x.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    block = triton.next_power_of_2(n_cols)
    if block <= MAX_SINGLE_BLOCK:
        num_warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        ${name}_row_kernel[(n_rows,)](x, out, n_cols, BLOCK=block, num_warps=num_warps)
    else:
        ${name}_row_looped_kernel[(n_rows,)](x, out, n_cols, BLOCK=LOOPED_BLOCK, num_warps=LOOPED_NUM_WARPS)
    return out
'''


class RowSoftmax(PlannedRecipe[OpNode]):
    """Recipe for `reduction_structure.row_softmax`."""

    key = KEY
    default_config = KernelConfig(block=2048, num_warps=8, max_single_block=16384)

    def render(self, view: TaskView, node: OpNode, config: KernelConfig) -> str:
        if config.block > config.max_single_block:
            raise NotApplicable("the looped chunk must not exceed max_single_block")
        log = node.op == "log_softmax"
        fill = {
            "name": node.op,
            "op": node.op,
            "single_result": "shifted - tl.log(denominator)" if log else "numerator / denominator",
            "looped_result": "shifted - log_denominator" if log else "tl.exp(shifted) / denominator",
        }
        input_name = node.operands[0].name  # type: ignore[union-attr]
        dim = number(node.param("dim"))
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{node.op}(dim={dim}) over the last dimension: one program per row, max-subtracted, fp32;",
                f"rows up to {config.max_single_block} wide in registers, "
                "longer rows in a looped online pass.",
            ),
            constants=(
                f"MAX_SINGLE_BLOCK = {config.max_single_block}  # widest row held in registers in one block",
                f"LOOPED_BLOCK = {config.block}  # chunk width of the looped kernel",
                f"LOOPED_NUM_WARPS = {config.num_warps}",
            ),
            helpers=(),
            kernels=(template.fill(_SINGLE, **fill), template.fill(_LOOPED, **fill)),
            launchers=(template.fill(_LAUNCHER, **fill),),
            class_doc=f"{node.op} over the last dimension with a per-row Triton kernel.",
            forward_body=(*_dim_guard(node, input_name), f"return {node.op}_rows({input_name})"),
        )
        return render_file(parts, view.skeleton)

    def plan(self, view: TaskView) -> OpNode:
        graph = view.graph
        if len(graph.nodes) != 1 or graph.nodes[0].kind is not OpKind.SOFTMAX:
            raise NotApplicable("the forward is not a single softmax / log_softmax")
        node = graph.nodes[0]
        source = node.operands[0]
        info = graph.tensor(source.name) if isinstance(source, Ref) else None
        if info is None or info.kind != "input":
            raise NotApplicable(f"{node.op} is not applied to a forward input")
        if info.dtype not in _FLOAT_DTYPES:
            raise NotApplicable(f"{node.op} input has dtype {info.dtype}")
        ndim = len(info.shape)
        dim = number(node.param("dim"))
        if not isinstance(dim, int) or ndim == 0:
            raise NotApplicable(f"{node.op} dim={dim} on a {ndim}-d input")
        if dim % ndim != ndim - 1:
            raise NotApplicable(
                f"{node.op} over dim {dim} of a {ndim}-d input is not over the last dimension"
            )
        return node


def _dim_guard(node: OpNode, input_name: str) -> tuple[str, ...]:
    (
        """When dim comes from a constructor argument, check at run time that it still means the last """
        """dimension."""
    )
    dim = node.param("dim")
    if not isinstance(dim, AttrScalar):
        return ()
    return (
        f"if self.{dim.path} % {input_name}.dim() != {input_name}.dim() - 1:  # the kernel reduces "
        "the last dim",
        f'    raise ValueError(f"{node.op} over dim {{self.{dim.path}}} is not over the last dimension")',
    )
