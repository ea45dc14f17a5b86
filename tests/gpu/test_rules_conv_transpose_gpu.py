"""conv_transpose_as_conv on CUDA at the tasks' DEFAULT sizes (marker gpu).

    pytest -m gpu tests/gpu/test_rules_conv_transpose_gpu.py -s     # -s prints the RULES_GPU lines

Each case: generate with the default config, build Model and ModelNew with the same seed on the GPU (identical
weights), TF32 off, run both on the task's own inputs and on a signed copy: allclose(1e-4, 1e-4). Then
`RULES_GPU task recipe eager_ms kernel_ms speedup ... phases_ms= conv_transpose_ms=`: whole-forward medians
(triton.testing.do_bench), plus the per-phase forward convolutions alone against the module's own eager
conv_transpose alone (where the time goes); where the phase writer takes no epilogue operand (no or a kept
epilogue), also `writer_ms=` and `writer_GBps=` (the writer alone on precomputed phases; bytes = one read of
the phases + one write of the output, i.e. 2 x output bytes, the floor it can reach). Synthetic models then
cover what the dev tasks do not: stride 3 with phases of unequal lengths, stride 5 (more phases than the
kernel's slots: interleaved first), per-channel / broadcast / full-shape epilogue operands. Timings are
information, not assertions.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gpu.rules_gpu_support import (
    FP32_STRICT,
    GPU_MARKS,
    CheckOptions,
    check_case,
    generate,
    make_task,
    report,
    time_call,
    time_checked,
)

KEY = "algebraic_rewrite.conv_transpose_as_conv"
CASES = [
    "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
    "level1/64_conv_transposed_1D.py",
    "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
    "level1/70_conv_transposed_3D__asymmetric_input__square_kernel.py",
    "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
    "level1/74_conv_transposed_1D_dilated.py",
    "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
    "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
    "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py",
    "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
    "level2/26_ConvTranspose3d_Add_HardSwish.py",
    "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
    # the ops around the conv are kept as they are (torch), only the conv is rewritten
    "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
    "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
    "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py",
    "level2/78_ConvTranspose3d_Max_Max_Sum.py",
]

pytestmark = [*GPU_MARKS, FP32_STRICT]


def _conv_module(model: torch.nn.Module) -> torch.nn.Module:
    kinds = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
    return next(m for m in model.modules() if isinstance(m, kinds))


@pytest.mark.parametrize("rel", CASES, ids=[c.split("/")[1][:-3] for c in CASES])
def test_rewrite_matches_reference_on_cuda_at_default_sizes(rel: str, tmp_path: Path) -> None:
    task = make_task(rel)
    source = generate(task, KEY)
    checked = check_case(task, source, tmp_path, CheckOptions())
    result = time_checked(checked)
    # where the time goes: the per-phase forward convs alone vs the eager transposed conv alone
    module = _conv_module(checked.models.model)
    phases = type(checked.models.model_new).forward.__globals__["conv_transpose_phases"]
    x = checked.inputs[0]
    if rel.startswith("level2/38"):  # its avg-pool runs before the conv
        reference: Any = checked.models.model
        x = reference.avg_pool(x)
    args = (module.stride, module.padding, module.output_padding, module.dilation, module.groups)
    phases_ms = time_call(lambda: phases(x, module.weight, None, *args))  # as ModelNew calls it
    conv_ms = time_call(lambda: module(x))
    extra = f" phases_ms={phases_ms:.4f} conv_transpose_ms={conv_ms:.4f}"
    names = type(checked.models.model_new).forward.__globals__
    write = next(f for name, f in names.items() if name.endswith("_write_phases"))
    if len(inspect.signature(write).parameters) == 4:  # phases, out_sizes, stride, bias: no epilogue operand
        with torch.no_grad():
            out_sizes, parts = phases(x, module.weight, None, *args)
            out = write(parts, out_sizes, module.stride, module.bias)
        writer_ms = time_call(lambda: write(parts, out_sizes, module.stride, module.bias))
        extra += f" writer_ms={writer_ms:.4f} writer_GBps={2 * out.nbytes / writer_ms / 1e6:.0f}"
        del parts, out
    report("RULES_GPU", rel, KEY, result=result, extra=extra)


SYNTHETIC_TEMPLATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose{nd}d(32, 16, {k}, stride={s}, padding=1, output_padding={op})
        self.scale = nn.Parameter(torch.randn(16, {ones}))
        self.row = nn.Parameter(torch.randn({last}))

    def forward(self, x, skip):
        return torch.sigmoid(self.up(x) * self.scale + self.row) - skip


def get_inputs():
    return [torch.randn(8, 32, {sizes}), torch.randn(8, 16, {out_sizes})]


def get_init_inputs():
    return []
"""

# (nd, k, stride, output_padding, input sizes): output sizes (I - 1) * s - 2 + k + op
SYNTHETIC = [
    (3, 3, 3, 1, (10, 12, 13)),  # 29 x 35 x 38: phases of unequal lengths in every dim
    (2, 5, 5, 2, (40, 41)),  # stride 5 > PHASE_SLOTS: 200 x 205
    (1, 4, 2, 1, (1000,)),  # 2001: odd length
]


@pytest.mark.parametrize("case", SYNTHETIC, ids=[f"{c[0]}d-k{c[1]}s{c[2]}" for c in SYNTHETIC])
def test_synthetic_strides_and_operands_on_cuda(case: tuple[Any, ...], tmp_path: Path) -> None:
    nd, k, s, op, sizes = case
    out_sizes = tuple((i - 1) * s - 2 + k + op for i in sizes)
    source = SYNTHETIC_TEMPLATE.format(
        nd=nd,
        k=k,
        s=s,
        op=op,
        ones=", ".join(["1"] * nd),
        last=out_sizes[-1],
        sizes=", ".join(map(str, sizes)),
        out_sizes=", ".join(map(str, out_sizes)),
    )
    (tmp_path / "synthetic").mkdir()
    (tmp_path / "synthetic" / "ct.py").write_text(source, encoding="utf-8")
    task = make_task("synthetic/ct.py", suite="synthetic", kb=tmp_path)
    checked = check_case(task, generate(task, KEY), tmp_path, CheckOptions())
    report("RULES_GPU", f"synthetic/{nd}d-k{k}s{s}", KEY, result=time_checked(checked))
