"""conv_transpose_as_conv's phase writer under TRITON_INTERPRET=1: row-phase launches, contiguous output rows.

The generated launcher (`conv_transpose{N}d_write_phases`) is called directly with hand-made phase tensors: the
phases of a known output, each in a layout of its own (contiguous, channel-major, a non-unit innermost stride,
a stride-0 broadcast), with lengths that differ when the stride does not divide the output length, an output
shorter than the stride, and innermost strides 1..5 (5 > PHASE_SLOTS: the interleaving fallback). It must
rebuild the output bit for bit (the kernel of a task with no epilogue copies and adds the bias). Missing or
misshapen phases must raise. Then full models with a per-channel operand, a flat-broadcast operand and a
full-shape operand in the epilogue, against Model (rtol = atol = 1e-4). Each check runs in a fresh process
with TRITON_INTERPRET=1 set before triton is imported.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import KernelConfig, RulesGenerator
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.conv_transpose.codegen import PHASE_SLOTS

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KEY = "algebraic_rewrite.conv_transpose_as_conv"

COPY_TEMPLATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose{nd}d(3, 4, 2, stride=2)

    def forward(self, x):
        return self.up(x)


def get_inputs():
    return [torch.randn(2, 3, {sizes})]


def get_init_inputs():
    return []
"""

# per nd: (stride, output sizes); uneven phase lengths, an output dim shorter than its stride, strides up to 5
LAYOUT_CASES: dict[int, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {
    1: [((1,), (7,)), ((2,), (7,)), ((3,), (8,)), ((4,), (9,)), ((5,), (13,)), ((3,), (2,)), ((3,), (40,))],
    2: [((2, 3), (5, 7)), ((3, 1), (4, 5)), ((1, 4), (3, 6))],
    3: [((2, 2, 2), (3, 4, 5)), ((1, 3, 2), (2, 5, 3)), ((2, 1, 5), (3, 2, 9))],
}

# epilogue with a per-channel operand (scale), a flat-broadcast one along the innermost dim (row) and a
# full-shape forward input (skip); the output sizes are L = (I - 1) * s + op + 1 (k = 3, padding 1)
OPERANDS_TEMPLATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose{nd}d(4, 6, 3, stride={s}, padding=1, output_padding={op})
        self.scale = nn.Parameter(torch.randn(6, {ones}))
        self.row = nn.Parameter(torch.randn({last}))

    def forward(self, x, skip):
        return torch.sigmoid(self.up(x) * self.scale + self.row) - skip


def get_inputs():
    return [torch.randn(2, 4, {sizes}), torch.randn(2, 6, {out_sizes})]


def get_init_inputs():
    return []
"""

OPERAND_CASES = [
    {"nd": 1, "s": 3, "op": 1, "sizes": (5,)},  # L = 14: phases of 5, 5, 4
    {"nd": 2, "s": 3, "op": 2, "sizes": (3, 4)},  # 9 x 12: a dim divisible, one not
    {"nd": 3, "s": 2, "op": 0, "sizes": (2, 3, 3)},  # 3 x 5 x 5: every dim uneven
]


def make_task(source: str) -> Task:
    return Task(
        key="synthetic", suite="x", level=None, name="synthetic", source=source, source_sha256="0" * 64
    )


def emit(source: str, config: KernelConfig | None = None) -> str:
    task = make_task(source)
    assert KEY in RulesGenerator().recipes_for(task)
    recipe = default_recipes()[KEY]
    generated = recipe.emit(task_view(task), config or recipe.default_config)
    report = static_analyse(generated, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.has_triton_kernel and report.violations == []
    return generated


def isolated(function: str, **kwargs: Any) -> Any:
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


def phase_in_layout(part: torch.Tensor, layout: int) -> torch.Tensor:
    """The same values as `part` in layout `layout % 3` (0 contiguous, 1 channel-major, 2 innermost stride 2)."""
    if layout % 3 == 1:
        return part.transpose(0, 1).contiguous().transpose(0, 1)
    if layout % 3 == 2:
        wide = torch.full((*part.shape[:-1], 2 * part.shape[-1]), float("nan"))
        wide[..., ::2] = part
        return wide[..., ::2]
    return part.contiguous()


def split_into_phases(
    expected: torch.Tensor, stride: tuple[int, ...]
) -> list[tuple[tuple[int, ...], torch.Tensor]]:
    """The phases of `expected` (each its own layout; every fourth a per-channel constant as a stride-0 view)."""
    nd = len(stride)
    grids: list[tuple[int, ...]] = [()]
    for s, size in zip(stride, expected.shape[2:], strict=True):
        grids = [g + (r,) for g in grids for r in range(min(s, size))]  # a phase with no element is left out
    phases = []
    for i, phase in enumerate(grids):
        view = expected[
            (slice(None), slice(None), *(slice(r, None, s) for r, s in zip(phase, stride, strict=True)))
        ]
        if i % 4 == 3:  # what conv_transpose_phases returns for a phase no tap reaches
            fill = torch.randn(expected.shape[1]).view(1, -1, *([1] * nd)).expand(view.shape)
            view.copy_(fill)
            phases.append((phase, fill))
        else:
            phases.append((phase, phase_in_layout(view.clone(), i)))
    return phases


def check_layouts(sources: dict[str, str], directory: Path) -> int:
    """Every LAYOUT_CASES case through the generated launcher: the output must equal the known one exactly."""
    checked = 0
    for nd_text, source in sources.items():
        nd = int(nd_text)
        module = import_candidate(source, directory)
        write = getattr(module, f"conv_transpose{nd}d_write_phases")
        for case, (stride, out_sizes) in enumerate(LAYOUT_CASES[nd]):
            gen = torch.Generator().manual_seed(100 * nd + case)
            expected = torch.randn(2, 3, *out_sizes, generator=gen)
            torch.manual_seed(100 * nd + case)
            phases = split_into_phases(expected, stride)
            got = write(phases, out_sizes, stride, None)
            assert got.shape == expected.shape and got.is_contiguous(), (got.shape, expected.shape)
            assert torch.equal(got, expected), f"{nd}D stride {stride}: {(got - expected).abs().max().item()}"
            bias = torch.randn(3, generator=gen)
            with_bias = write(phases, out_sizes, stride, bias)
            assert torch.equal(with_bias, expected + bias.view(1, 3, *([1] * nd))), f"{nd}D {stride} bias"
            checked += 1
    return checked


def check_bad_phases(source: str, directory: Path) -> list[str]:
    """The launcher's errors for a missing phase and a phase of the wrong length (no kernel runs)."""
    write = import_candidate(source, directory).conv_transpose1d_write_phases
    expected = torch.randn(2, 3, 7)
    phases = split_into_phases(expected, (2,))
    errors = []
    for bad in (phases[:1], [phases[0], (phases[1][0], phases[1][1][..., :2])]):
        try:
            write(bad, (7,), (2,), None)
        except ValueError as e:
            errors.append(str(e))
    return errors


def check_operands(task_source: str, candidates: list[str], directory: Path) -> float:
    """Every candidate against Model on the task's inputs and a signed copy; the worst max abs error."""
    ref_mod = load_task_module(task_source, "reference", {})
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for candidate_source in candidates:
        torch.manual_seed(0)
        model = ref_mod.Model()
        model_new = import_candidate(candidate_source, directory).ModelNew()
        model_new.load_state_dict(model.state_dict())
        for inputs in (own, [x * 6 - 3 for x in own]):
            with torch.no_grad():
                expected = model(*inputs)
                got = model_new(*inputs)
            assert got.shape == expected.shape and got.is_contiguous(), (got.shape, expected.shape)
            assert expected.std() > 0, "degenerate reference output at this size"
            err = (got - expected).abs().max().item()
            assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
            worst = max(worst, err)
    return worst


def test_the_kernel_has_phase_slots_and_stores_contiguously() -> None:
    source = emit(COPY_TEMPLATE.format(nd=3, sizes="2, 3, 4"))
    kernel = source[source.index("@triton.jit") : source.index("\n\n\n", source.index("@triton.jit"))]
    assert all(f"phase{j}_ptr" in kernel for j in range(PHASE_SLOTS))
    assert "S3: tl.constexpr" in kernel and "r3 = o3 % S3" in kernel
    assert "out_index = out_row[:, None] * L3 + o3[None, :]" in kernel  # no stride on the store's inner dim
    assert kernel.count("tl.store(") == 1


def test_launcher_rebuilds_the_output_from_phases_in_any_layout(tmp_path: Path) -> None:
    sources = {
        # small tiles: partial tiles along the rows and the innermost dim, several tiles per row (L3 = 40)
        "1": emit(COPY_TEMPLATE.format(nd=1, sizes="4"), KernelConfig(block=16, num_warps=1)),
        "2": emit(COPY_TEMPLATE.format(nd=2, sizes="3, 4")),
        "3": emit(COPY_TEMPLATE.format(nd=3, sizes="2, 3, 4"), KernelConfig(block=16, num_warps=1)),
    }
    checked = isolated("check_layouts", sources=sources, directory=tmp_path)
    assert checked == sum(len(cases) for cases in LAYOUT_CASES.values())


def test_launcher_rejects_missing_and_misshapen_phases(tmp_path: Path) -> None:
    source = emit(COPY_TEMPLATE.format(nd=1, sizes="4"))
    errors = isolated("check_bad_phases", source=source, directory=tmp_path)
    assert len(errors) == 2
    assert "phase (0, 0, 1) is missing" in errors[0]
    assert "phase (0, 0, 1) has shape (2, 3, 1, 1, 2), expected (N, C, *(1, 1, 3))" in errors[1]


@pytest.mark.parametrize("case", OPERAND_CASES, ids=[f"{c['nd']}d-s{c['s']}" for c in OPERAND_CASES])
def test_epilogue_operands_per_channel_broadcast_and_full(case: dict[str, Any], tmp_path: Path) -> None:
    nd, s, op, sizes = case["nd"], case["s"], case["op"], case["sizes"]
    out_sizes = tuple((i - 1) * s + op + 1 for i in sizes)
    source = OPERANDS_TEMPLATE.format(
        nd=nd,
        s=s,
        op=op,
        ones=", ".join(["1"] * nd),
        last=out_sizes[-1],
        sizes=", ".join(map(str, sizes)),
        out_sizes=", ".join(map(str, out_sizes)),
    )
    generated = emit(source)
    kernel = generated[generated.index("@triton.jit") :]
    assert "scale_ptr + c," in kernel  # per-channel: read at the row's channel
    assert "(out_index // row_inner) % row_size" in kernel  # flat broadcast through broadcast_layout
    assert "skip_ptr + out_index" in kernel  # full shape
    candidates = [generated, emit(source, KernelConfig(block=16, num_warps=1))]
    worst = isolated("check_operands", task_source=source, candidates=candidates, directory=tmp_path)
    assert worst <= 1e-4
