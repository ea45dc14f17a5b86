"""The Python launcher of the pooling kernel (codegen.py) and the module-level constants a tuning recipe
varies: window parameters read from the pooling module at run time, the output (broadcast with the epilogue's
operands), the tile shape, and launches in slices of CUDA's grid axis-1 limit."""

from __future__ import annotations

from htam_graph.rules.base import KernelConfig
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import Leaf
from htam_graph.rules.recipes.pooling.codegen import PoolCode

__all__ = ["pool_constants", "pool_launcher_source"]

_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """$op of the prologue over `$src`, then the epilogue; window parameters read from `pool`."""
    nd = $nd  # pooled spatial dimensions
    if $src.dim() != nd + 2:
        raise ValueError(f"expected a batched {nd + 2}-d input, got shape {tuple($src.shape)}")
    kernel = as_window(pool.kernel_size, nd)
    stride = as_window(pool.stride if pool.stride is not None else pool.kernel_size, nd)
    padding = as_window(pool.padding, nd)
    dilation = as_window(getattr(pool, "dilation", 1), nd)
    ceil_mode = bool(pool.ceil_mode)
    in_sizes = tuple($src.shape[2:])
    out_sizes = tuple(
        pool_output_size(n, k, s, p, d, ceil_mode)
        for n, k, s, p, d in zip(in_sizes, kernel, stride, padding, dilation, strict=True)
    )
    pool_shape = (*$src.shape[:2], *out_sizes)
    $prologue_checks
    $epilogue_shape
    $operands
    out = torch.empty($out_shape, device=$src.device, dtype=$src.dtype)
    if out.numel() == 0:
        return out
    pad3 = (3 - nd) * (1,)
    in3, out3, k3 = pad3 + in_sizes, pad3 + out_sizes, pad3 + kernel
    s3, p3, d3 = pad3 + stride, (3 - nd) * (0,) + padding, pad3 + dilation
    n_rows = out.numel() // out3[2]  # output rows (plane, od, oh), each of out3[2] outputs along W
    # BLOCK outputs per program: along W, and over several rows when a row is shorter than BLOCK
    block_w = min($block, triton.next_power_of_2(out3[2]))
    rows = $block // block_w
    n_w_blocks = triton.cdiv(out3[2], block_w)
    # CUDA caps grid axis 1 at 65535 programs: very long rows are launched in slices of W blocks
    for w_block_first in range(0, n_w_blocks, MAX_GRID_AXIS1):
        grid = (triton.cdiv(n_rows, rows), min(MAX_GRID_AXIS1, n_w_blocks - w_block_first))
        $kernel[grid](
            $args,
            $window
            ROWS=rows,
            BLOCK_W=block_w,
            INDEX_64=max(out.numel(), $src.numel()) + $block > INT32_MAX,
            num_warps=$warps,
        )
    return out
'''

_PROLOGUE_CHECK = """\
if torch.broadcast_shapes($arg.shape, $src.shape) != $src.shape:
    raise ValueError("$arg does not broadcast to the pooled input")
"""

_EPILOGUE_SHAPE = """\
out_shape = torch.broadcast_shapes(pool_shape$others)
if out_shape != pool_shape:
    raise ValueError("the epilogue operands do not broadcast to the pooled shape")
"""


def pool_launcher_source(code: PoolCode, launcher_name: str, kernel_name: str) -> str:
    """The Python launcher: window parameters from the module, output allocation, broadcast layouts, grid."""
    leaves = code.tensor_leaves()
    src = code.source.arg
    signature = ", ".join(
        [f"{leaf.arg}: torch.Tensor" for leaf in leaves]
        + [f"{s.arg}: float" for s in code.scalars]
        + ["pool: nn.Module"]
    )
    out_shape = "pool_shape" if code.post is None else "out_shape"
    return template.fill(
        _LAUNCHER,
        name=launcher_name,
        signature=signature,
        op=code.op,
        src=src,
        nd=code.nd,
        prologue_checks=[
            template.fill(_PROLOGUE_CHECK, arg=leaf.arg, src=src)
            for leaf in code.pre_leaves()
            if leaf != code.source
        ],
        epilogue_shape=_epilogue_shape(code),
        operands=[line for leaf in leaves for line in _prepare_operand(code, leaf, out_shape)],
        out_shape=out_shape,
        block=block_constant(kernel_name),
        kernel=kernel_name,
        args=", ".join(_launch_args(code)),
        window=[f"{w}," for w in _window_constants(code)],
        warps=warps_constant(kernel_name),
    )


def _epilogue_shape(code: PoolCode) -> str:
    """The output shape with the epilogue's operands, which must not change the pooled shape."""
    if code.post is None:
        return ""
    others = ", ".join(f"{leaf.arg}.shape" for leaf in code.post_leaves())
    return template.fill(_EPILOGUE_SHAPE, others=", " + others if others else "")


def _prepare_operand(code: PoolCode, leaf: Leaf, out_shape: str) -> list[str]:
    """Contiguous, and a broadcast operand's layout against the tensor it is read with."""
    lines = [f"{leaf.arg} = {leaf.arg}.contiguous()"]
    if leaf.broadcast:
        target = f"{code.source.arg}.shape" if leaf in code.pre_leaves() else out_shape
        lines.append(f"{leaf.arg}_inner, {leaf.arg}_size = broadcast_layout({leaf.arg}.shape, {target})")
    return lines


def _launch_args(code: PoolCode) -> list[str]:
    leaves = code.tensor_leaves()
    args = [leaf.arg for leaf in leaves] + ["out", "n_rows", "*in3", "*out3", "w_block_first"]
    args += [f"{leaf.arg}_inner, {leaf.arg}_size" for leaf in leaves if leaf.broadcast]
    return args + [s.arg for s in code.scalars]


def _window_constants(code: PoolCode) -> list[str]:
    """The window's constexpr arguments (and how each broadcast operand is read along W)."""
    window = ["KD=k3[0], KH=k3[1], KW=k3[2]", "SD=s3[0], SH=s3[1], SW=s3[2]", "PD=p3[0], PH=p3[1], PW=p3[2]"]
    if code.is_max:
        window.append("DD=d3[0], DH=d3[1], DW=d3[2]")
    else:
        divisor = "int(pool.divisor_override or 0)" if code.nd > 1 else "0"
        window += ["COUNT_INCLUDE_PAD=bool(pool.count_include_pad)", f"DIVISOR_OVERRIDE={divisor}"]
    for leaf in code.tensor_leaves():
        if leaf.broadcast:
            along_w = "in3[2]" if leaf in code.pre_leaves() else "out3[2]"
            window.append(f"{leaf.arg}_PER_ROW={leaf.arg}_inner % {along_w} == 0 or {leaf.arg}_size == 1")
    return window


def block_constant(kernel_name: str) -> str:
    return "BLOCK_" + kernel_name.upper().removesuffix("_KERNEL")


def warps_constant(kernel_name: str) -> str:
    return "NUM_WARPS_" + kernel_name.upper().removesuffix("_KERNEL")


def pool_constants(kernel_name: str, config: KernelConfig) -> list[str]:
    """Module-level launch constants (what a tuning recipe changes)."""
    return [
        f"{block_constant(kernel_name)} = {config.block}  # pooled outputs per program",
        f"{warps_constant(kernel_name)} = {config.num_warps}",
        "MAX_GRID_AXIS1 = 65535  # CUDA's limit on grid axis 1 (blocks along W); rows go on axis 0",
        "INT32_MAX = 2**31 - 1  # beyond it, row bases are computed in 64 bits (INDEX_64)",
    ]
