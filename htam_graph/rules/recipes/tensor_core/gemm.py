"""The 3xTF32 tensor-core GEMM a candidate file carries, and the forward expression that calls it.

The kernel computes C = A @ B (+ bias over the last dim) with `tl.dot(..., input_precision="tf32x3")`: each
fp32 operand is split into a TF32 high part and a residual, and hi*hi + hi*lo + lo*hi accumulate in fp32 on
tensor cores, close to fp32 accuracy (the runtime still checks every result at the task's tolerance). On the
H200 plain fp32 GEMMs run on the CUDA cores; this kernel ran 1.65x faster than cuBLAS's fp32 GEMM (geomean
over the dev split's distinct GEMMs), with a smaller error against fp64
(results/h200/rules_tensor_core_2026-12-02).

Operands are read through their strides when they are K-major (A's rows and B's columns contiguous along
K, as x and W.t() of nn.Linear are); other layouts are copied to K-major once. A batch axis covers bmm and
batched matmul (stride 0 broadcasts a 2-D operand over the batch). K is zero-padded to whole tiles. When the
output has fewer tiles than the GPU has SMs and K is long, K is split across programs and the partial
products are summed (on the H200 only level1/6 took that path: correct, 0.31x with its B copied, and it
now stays on cuBLAS).
"""

from __future__ import annotations

import math

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.compose.torch_calls import tensor_expr
from htam_graph.rules.ops import GEMM_OPS, Const, OpGraph, OpNode, Ref

__all__ = ["GEMM_KERNEL_SOURCE", "GEMM_LAUNCHER_SOURCE", "compute_bound", "gemm_call", "gemm_size"]

# Below this many multiply-adds the GEMM is launch- or memory-bound: cuBLAS stays.
MIN_MACS = 2**26
MIN_SIDE = 64  # M and N at least this: thinner products (matrix-vector) are memory-bound
# An N-major B is copied to K-major, one pass over K x N elements: with fewer rows than this (M MACs per
# element of B) the copy is not hidden. H200: M = 256, K = 524288 ran at 0.31x of cuBLAS with the copy.
MIN_ROWS_TO_COPY_B = 512

GEMM_KERNEL_SOURCE = '''\
@triton.jit
def tf32x3_gemm_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr,
    M, N, K, k_per_split,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cs, stride_cb, stride_cm,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C[split, batch] = A[batch] @ B[batch] over this split's range of K (+ bias, in split 0 only).

    Programs walk the output tiles in groups of GROUP_M tile rows, so consecutive programs share B's columns
    in L2. Out-of-range rows and columns read row / column 0 (no masks in the K loop) and are not stored.
    EVEN_K: every split's K range is a whole number of BLOCK_K steps (no K mask either).
    """
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * tiles_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm_in = tl.where(rm < M, rm, 0).to(tl.int64)
    rn_in = tl.where(rn < N, rn, 0).to(tl.int64)
    k_start = split * k_per_split
    k_end = tl.minimum(K, k_start + k_per_split)
    rk = tl.arange(0, BLOCK_K)
    rk_start = (k_start + rk).to(tl.int64)
    a_ptrs = a_ptr + batch * stride_ab + rm_in[:, None] * stride_am + rk_start[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + rk_start[:, None] * stride_bk + rn_in[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_in = (k + rk) < k_end
            a = tl.load(a_ptrs, mask=k_in[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_in[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")  # 3xTF32: fp32-level accuracy on tensor cores
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn_in)[None, :] * (split == 0).to(tl.float32)
    c_ptrs = c_ptr + split.to(tl.int64) * stride_cs + batch * stride_cb
    c_ptrs += rm_in[:, None] * stride_cm + rn_in[None, :]
    tl.store(c_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))'''

GEMM_LAUNCHER_SOURCE = '''\
def gemm_tiles(m: int, n: int, k: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the GEMM kernel for an M x N x K product."""
    if m <= 64:
        return 64, 128, 32, 4, 4
    return 128, 128, 64, 8, 3


def tf32x3_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """torch.matmul(a, b) (+ bias over the last dim) for fp32 a (..., M, K) and b (K, N), or a and b with
    the same batch dims (a 2-D a broadcasts over b's batch), on tensor cores in 3xTF32."""
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"tf32x3_matmul: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    if b.dim() == 2:  # every leading dim of a is a row of one GEMM
        out_shape = (*a.shape[:-1], b.shape[1])
        a3, b3 = a.reshape(1, -1, a.shape[-1]), b.unsqueeze(0)
    else:
        lead = b.shape[:-2]
        if a.dim() == 2:
            a = a.expand(*lead, *a.shape)
        if a.shape[:-2] != lead:
            raise ValueError(f"tf32x3_matmul: batch dims {tuple(a.shape)} and {tuple(b.shape)} differ")
        out_shape = (*lead, a.shape[-2], b.shape[-1])
        a3, b3 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    batch, m, k = a3.shape
    n = b3.shape[2]
    if batch * m * n == 0 or k == 0:
        out = torch.zeros((batch, m, n), device=a.device, dtype=torch.float32)
        return (out + bias if bias is not None else out).reshape(out_shape)
    block_m, block_n, block_k, warps, stages = gemm_tiles(m, n, k)
    if k % block_k:  # whole K tiles: no masks in the K loop, every row 16-byte aligned (a copy, zero-padded)
        pad = block_k - k % block_k
        a3 = torch.nn.functional.pad(a3, (0, pad))
        b3 = torch.nn.functional.pad(b3.transpose(1, 2), (0, pad)).transpose(1, 2)
        k += pad
    # K-major operands: Hopper's TF32 tensor-core instructions read B's tile along K (a B tile with N
    # contiguous runs through a much slower path), so other layouts are copied once, a memory pass.
    if a3.stride(2) != 1:
        a3 = a3.contiguous()
    if b3.stride(1) != 1:
        b3 = b3.transpose(1, 2).contiguous().transpose(1, 2)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    splits = 1
    programs = 2 * torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 8
    if tiles * batch < programs and k >= 8 * 1024:  # too few tiles to fill the GPU: split K
        splits = min(triton.cdiv(programs, tiles * batch), k // 4096)
    k_per_split = triton.cdiv(triton.cdiv(k, splits), block_k) * block_k
    splits = triton.cdiv(k, k_per_split)
    c = torch.empty((splits, batch, m, n), device=a.device, dtype=torch.float32)
    bias_arg = bias.contiguous() if bias is not None else c
    tf32x3_gemm_kernel[(tiles, batch, splits)](
        a3, b3, bias_arg, c,
        m, n, k, k_per_split,
        a3.stride(0), a3.stride(1), a3.stride(2),
        b3.stride(0), b3.stride(1), b3.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
        HAS_BIAS=bias is not None,
        EVEN_K=k_per_split % block_k == 0,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=warps, num_stages=stages,
    )
    out = c[0] if splits == 1 else c.sum(dim=0)
    return out.reshape(out_shape)'''


def gemm_size(graph: OpGraph, node: OpNode) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a GEMM node at the analysed sizes; NotApplicable when the launcher cannot run it
    (a vector operand, batch dims that differ, a non-fp32 tensor)."""
    if node.op not in GEMM_OPS:
        raise NotApplicable(f"{node.op} is not a GEMM")
    a, b = (_operand_shape(graph, v) for v in node.operands[:2])
    if node.op == "linear":
        if len(b) != 2:
            raise NotApplicable("linear with a weight that is not 2-D")
        b = (b[1], b[0])  # the launcher multiplies by weight.t()
    if len(a) < 2 or len(b) < 2:
        raise NotApplicable(f"{node.op} of a vector operand ({a} by {b}) is a matrix-vector product")
    if len(b) > 2 and a[:-2] != b[:-2] and len(a) != 2:
        raise NotApplicable(f"{node.op} broadcasts batch dims {a[:-2]} against {b[:-2]}")
    if node.dtype not in ("", "torch.float32"):
        raise NotApplicable(f"{node.op} computes in {node.dtype}, not fp32")
    if len(b) == 2:
        return 1, math.prod(a[:-1]), b[1], a[-1]
    return math.prod(b[:-2]), a[-2], b[-1], a[-1]


def compute_bound(graph: OpGraph, node: OpNode) -> bool:
    """Whether a GEMM is large enough for the tensor-core kernel to pay off (MIN_MACS, MIN_SIDE) and, when
    its B operand must be copied to K-major first, has rows enough to hide the copy (MIN_ROWS_TO_COPY_B)."""
    try:
        batch, m, n, k = gemm_size(graph, node)
    except NotApplicable:
        return False
    if not _b_k_major(graph, node) and m < MIN_ROWS_TO_COPY_B:
        return False
    return min(m, n) >= MIN_SIDE and k >= MIN_SIDE and batch * m * n * k >= MIN_MACS


def _b_k_major(graph: OpGraph, node: OpNode) -> bool:
    """Whether B reaches the kernel K-major: nn.Linear's W.t(), or the transpose (`.T`, `.t()`) of a
    row-major tensor; a forward input or a computed tensor multiplied as it is is N-major."""
    if node.op == "linear":
        return True
    b = node.operands[1]
    source = graph.node(b.name) if isinstance(b, Ref) else None
    return source is not None and source.op == "t"


def gemm_call(graph: OpGraph, node: OpNode, computed: dict[str, str]) -> str:
    """The forward expression computing `node` with `tf32x3_matmul` (its comment included)."""
    a, b = (tensor_expr(graph, v, computed) for v in node.operands[:2])
    args = [a, f"{b}.t()" if node.op == "linear" else b]
    bias = node.operands[2] if node.op == "linear" and len(node.operands) > 2 else Const(None)
    if isinstance(bias, Ref):
        args.append(tensor_expr(graph, bias, computed))
    elif bias != Const(None):
        raise NotApplicable(f"linear with a bias {bias!r} that is not a tensor")
    return f"tf32x3_matmul({', '.join(args)})  # Triton: 3xTF32 tensor-core GEMM ({node.origin or node.op})"


def _operand_shape(graph: OpGraph, value: object) -> tuple[int, ...]:
    if not isinstance(value, Ref):
        raise NotApplicable(f"a GEMM operand {value!r} is not a tensor")
    return tuple(graph.shape_of(value.name))
