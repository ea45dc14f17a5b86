"""algebraic_rewrite.diag_matmul_as_broadcast: diag(a) @ B -> a[:, None] * B, and B @ diag(a) -> B * a[None,
:].

Recognised forms (a 1-D, B 2-D, both float32 forward inputs or parameters):
    torch.diag(a) @ B   (matmul / mm)        a.unsqueeze(1) * B  (or unsqueeze(-1), either operand order)
    B @ torch.diag(a)                        a.unsqueeze(0) * B
The rewrite is exact: row i of diag(a) @ B has one non-zero product a[i] * B[i, j] (for finite values), so
the O(N^2 M) matmul and the N x N matrix become one pass over B. The kernel is a 2D grid: one program per
(row, BLOCK columns); the scaling factor of a row is loaded once (rows form) or a BLOCK of it (columns form).
"""

from __future__ import annotations

from dataclasses import dataclass

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.ops import OpGraph, OpKind, Ref, number

KEY = "algebraic_rewrite.diag_matmul_as_broadcast"

_KERNEL = '''@triton.jit
def diag_scale_kernel(a_ptr, b_ptr, out_ptr, n_cols, SCALE_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """out[i, j] = a[i] * b[i, j] (SCALE_ROWS) or b[i, j] * a[j]: one program per (row, BLOCK columns), \
fp32."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    b = tl.load(b_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    if SCALE_ROWS:
        scale = tl.load(a_ptr + row).to(tl.float32)  # diag(a) @ B: row i scaled by a[i]
        result = scale * b
    else:
        scale = tl.load(a_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # B @ diag(a): column j by a[j]
        result = b * scale
    tl.store(out_ptr + row * n_cols + cols, result.to(out_ptr.dtype.element_ty), mask=mask)
'''

_LAUNCHER = '''def diag_scale(a: torch.Tensor, b: torch.Tensor, scale_rows: bool) -> torch.Tensor:
    """diag(a) @ b (scale_rows) or b @ diag(a), without building diag(a): one pass over b."""
    if a.dim() != 1 or b.dim() != 2:
        raise ValueError(f"expected a 1-d scale and a 2-d matrix, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[0] != b.shape[0 if scale_rows else 1]:
        raise ValueError(f"diag of {tuple(a.shape)} does not match the matrix {tuple(b.shape)}")
    a, b = a.contiguous(), b.contiguous()
    n_rows, n_cols = b.shape
    out = torch.empty_like(b)
    if out.numel() == 0:
        return out
    grid = (n_rows, triton.cdiv(n_cols, BLOCK_DIAG_SCALE))
    diag_scale_kernel[grid](a, b, out, n_cols, SCALE_ROWS=scale_rows, BLOCK=BLOCK_DIAG_SCALE, \
num_warps=NUM_WARPS_DIAG_SCALE)
    return out
'''


@dataclass(frozen=True)
class DiagPlan:
    """What the forward computes: diag(vector) times matrix, scaling rows or columns."""

    vector: str  # forward expression of a
    matrix: str  # forward expression of B
    scale_rows: bool
    form: str  # what the forward wrote, for the header


class DiagMatmulAsBroadcast(PlannedRecipe[DiagPlan]):
    """Recipe for `algebraic_rewrite.diag_matmul_as_broadcast`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def render(self, view: TaskView, plan: DiagPlan, config: KernelConfig) -> str:
        what = "diag(a) @ B = a[:, None] * B" if plan.scale_rows else "B @ diag(a) = B * a[None, :]"
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=(
                f"The forward computes {plan.form}; rewritten exactly as {what}:",
                "one Triton pass over B instead of a diagonal matrix and a matmul.",
            ),
            constants=(
                f"BLOCK_DIAG_SCALE = {config.block}  # columns per program",
                f"NUM_WARPS_DIAG_SCALE = {config.num_warps}",
            ),
            helpers=(),
            kernels=(_KERNEL,),
            launchers=(_LAUNCHER,),
            class_doc=f"{plan.form} as one row/column scaling kernel ({what}).",
            forward_body=(f"return diag_scale({plan.vector}, {plan.matrix}, scale_rows={plan.scale_rows})",),
        )
        return render_file(parts, view.skeleton)

    def plan(self, view: TaskView) -> DiagPlan:
        """Match one of the recognised forms. Raises NotApplicable."""
        graph = view.graph
        if len(graph.nodes) != 2 or graph.output.name != graph.nodes[1].name:
            raise NotApplicable(
                "the forward is not a diagonal-matrix product (two ops: diag/unsqueeze, then matmul/mul)"
            )
        first, second = graph.nodes
        if first.kind is not OpKind.LAYOUT or first.op not in ("diag", "unsqueeze"):
            raise NotApplicable(f"the forward does not start with torch.diag or unsqueeze ({first.op})")
        vector = _leaf(graph, first.operands[0], 1)
        if first.op == "diag":
            if number(first.param("diagonal")) != 0:
                raise NotApplicable("torch.diag with an offset diagonal")
            if second.op not in ("matmul", "mm"):
                raise NotApplicable(f"torch.diag(a) is followed by {second.op}, not a matmul")
            left, right = second.operands[:2]
            scale_rows = isinstance(left, Ref) and left.name == first.name
            other = right if scale_rows else left
            form = "torch.diag(a) @ B" if scale_rows else "B @ torch.diag(a)"
        else:
            dim = number(first.param("dim"))
            if dim not in (0, 1, -1, -2):
                raise NotApplicable(f"unsqueeze(dim={dim}) of a vector")
            if second.op != "mul":
                raise NotApplicable(f"a.unsqueeze() is followed by {second.op}, not a multiply")
            scale_rows = dim in (1, -1)
            left, right = second.operands[:2]
            other = right if isinstance(left, Ref) and left.name == first.name else left
            form = f"a.unsqueeze({dim}) * B"
        if isinstance(other, Ref) and other.name == first.name:
            raise NotApplicable("the diagonal matrix multiplies itself")
        matrix = _leaf(graph, other, 2)
        info_a = graph.tensor(vector)
        info_b = graph.tensor(matrix)
        assert info_a is not None and info_b is not None
        if info_a.shape[0] != info_b.shape[0 if scale_rows else 1]:
            raise NotApplicable("the vector's length does not match the scaled dimension")
        if second.shape != info_b.shape:
            raise NotApplicable("the product does not have B's shape")
        return DiagPlan(_expr(graph, vector), _expr(graph, matrix), scale_rows, form)


def _leaf(graph: OpGraph, value: object, ndim: int) -> str:
    if not isinstance(value, Ref) or graph.tensor(value.name) is None:
        raise NotApplicable(
            f"an operand of the diagonal product is not a forward input or parameter: {value}"
        )
    info = graph.tensor(value.name)
    assert info is not None
    if len(info.shape) != ndim:
        raise NotApplicable(f"{info.name} is {len(info.shape)}-d, expected {ndim}-d")
    if info.dtype != "torch.float32":
        raise NotApplicable(f"{info.name} has dtype {info.dtype} (the rewrite is written for float32)")
    return info.name


def _expr(graph: OpGraph, name: str) -> str:
    info = graph.tensor(name)
    assert info is not None
    return name if info.kind == "input" else f"self.{name}"
