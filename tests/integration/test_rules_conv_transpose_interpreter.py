"""conv_transpose_as_conv kernels under TRITON_INTERPRET=1 on the CPU, against Model, on the dev tasks it accepts.

Each accepted dev task is generated, then ModelNew runs against Model at small sizes (same seed for both
constructors) on the task's own inputs and a signed copy; rtol=atol=1e-4 (fp32). The weight is then doubled in
place on both models: the outputs must follow (the weight transform is per call, never cached). Synthetic
models cover strides 3 to 5 (5: more phases than the kernel's slots), phases of unequal lengths, an output
shorter than the stride, dilation, groups, output_padding and 1D / 2D / 3D with an epilogue. Each check runs in a
fresh process with TRITON_INTERPRET=1 set before triton is imported.
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
from htam_graph.rules import KernelConfig, RulesGenerator, parse_header
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "algebraic_rewrite.conv_transpose_as_conv"

CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth_in": 3, "height_in": 4, "width_in": 5},
    ),
    ("level1/64_conv_transposed_1D.py", {"batch_size": 2, "in_channels": 3, "out_channels": 5, "length": 9}),
    (
        "level1/68_conv_transposed_3D__square_input__asymmetric_kernel.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 3, "width": 4, "height": 5},
    ),
    (
        "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
        {"batch_size": 2, "in_channels": 8, "out_channels": 4, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level1/74_conv_transposed_1D_dilated.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "length": 11},
    ),
    (
        "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 5, "width": 9},
    ),
    (
        "level2/100_ConvTranspose3d_Clamp_Min_Divide.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 5, "width": 6},
    ),
    (
        "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level2/26_ConvTranspose3d_Add_HardSwish.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "D": 3, "H": 4, "W": 5},
    ),
    (
        "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 6, "width": 7},
    ),
    # the ops around the conv are kept as they are (pooling, norms, reductions)
    (
        "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 6, "width": 6},
    ),
    (  # the LayerNorm normalises the last dim, whose size must stay out_channels: W = 2 -> 4
        "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "D": 2, "H": 3, "W": 2},
    ),
    (  # avg-pool BEFORE the conv, softmax over the flattened output after it
        "level2/38_ConvTranspose3d_AvgPool_Clamp_Softmax_Multiply.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 4, "height": 4, "width": 6},
    ),
    (
        "level2/78_ConvTranspose3d_Max_Max_Sum.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 4, "height": 4, "width": 5},
    ),
]

SYNTHETIC_TEMPLATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose{nd}d(4, 6, {k}, stride={s}, padding={p}, output_padding={op}, dilation={d},
                                        groups={g}, bias={bias})

    def forward(self, x):
        return torch.tanh(self.up(x)) * 0.5


def get_inputs():
    return [torch.randn(2, 4, {sizes})]


def get_init_inputs():
    return []
"""

SYNTHETIC = [
    {"nd": 1, "k": 4, "s": 3, "p": 2, "op": 2, "d": 1, "g": 2, "bias": True, "sizes": "7"},
    {"nd": 2, "k": 3, "s": 2, "p": 0, "op": 1, "d": 2, "g": 1, "bias": False, "sizes": "5, 6"},
    {"nd": 2, "k": 1, "s": 3, "p": 0, "op": 1, "d": 1, "g": 2, "bias": True, "sizes": "3, 4"},
    {"nd": 3, "k": 2, "s": 2, "p": 1, "op": 0, "d": 1, "g": 1, "bias": True, "sizes": "3, 4, 3"},
    {"nd": 1, "k": 5, "s": 1, "p": 4, "op": 1, "d": 2, "g": 1, "bias": True, "sizes": "9"},
    # phases of unequal lengths (stride does not divide the output), stride 3 in 3D: 5 x 8 x 8
    {"nd": 3, "k": 3, "s": 3, "p": 1, "op": 1, "d": 1, "g": 1, "bias": True, "sizes": "2, 3, 3"},
    # stride 4 = PHASE_SLOTS, phases no tap reaches (k < s): 13 x 9
    {"nd": 2, "k": 2, "s": 4, "p": 0, "op": 3, "d": 1, "g": 1, "bias": False, "sizes": "3, 2"},
    # stride 5 > PHASE_SLOTS: the phases are interleaved before the kernel; 19 outputs
    {"nd": 1, "k": 3, "s": 5, "p": 1, "op": 3, "d": 1, "g": 1, "bias": True, "sizes": "4"},
    # an output dim shorter than the stride (2 < 3): only some phases exist
    {"nd": 2, "k": 1, "s": 3, "p": 0, "op": 1, "d": 1, "g": 2, "bias": True, "sizes": "3, 1"},
]


def make_task(source: str, key: str) -> Task:
    return Task(key=key, suite="kernelbench", level=None, name=key, source=source, source_sha256="0" * 64)


def check_against_reference(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any]
) -> float:
    """Every candidate against Model on two input sets and after a weight change; the worst max abs error."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for candidate_source in candidates:
        torch.manual_seed(0)
        model = ref_mod.Model(*init)
        cand = import_candidate(candidate_source, directory)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
        model_new.load_state_dict(model.state_dict())
        for step in range(3):
            if step == 2:  # a changed weight must change the output: nothing is cached
                with torch.no_grad():
                    for m in (model, model_new):
                        next(p for n, p in m.named_parameters() if n.endswith("weight")).mul_(2.0)
            for inputs in (own, [x * 6 - 3 for x in own])[: 1 if step == 2 else 2]:
                with torch.no_grad():
                    expected = model(*[x.clone() for x in inputs])
                    kept = [x.clone() for x in inputs]
                    got = model_new(*inputs)
                assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True)), "inputs changed"
                assert type(got) is torch.Tensor and got.shape == expected.shape, (got.shape, expected.shape)
                assert got.is_contiguous() and got.dtype == expected.dtype
                assert expected.std() > 0, "degenerate reference output at this size"
                err = (got - expected).abs().max().item()
                assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
                worst = max(worst, err)
    return worst


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


def emit(task: Task, config: KernelConfig | None = None) -> str:
    recipe = default_recipes()[KEY]
    return recipe.emit(task_view(task), config or recipe.default_config)


def checked_sources(task: Task, small_tiles: bool = False) -> list[str]:
    """The default-config source (statically checked) and, with small_tiles, a BLOCK=16 one."""
    assert KEY in RulesGenerator().recipes_for(task)
    source = emit(task)
    header = parse_header(source)
    assert header is not None and header.recipe == KEY
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.has_triton_kernel and report.violations == []
    # BLOCK=16: partial tiles along both the rows and the innermost dim (slow under the interpreter)
    return [source, emit(task, KernelConfig(block=16, num_warps=1))] if small_tiles else [source]


@pytest.mark.parametrize(("rel", "overrides"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_generated_kernel_matches_reference(rel: str, overrides: dict[str, Any], tmp_path: Path) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    candidates = checked_sources(make_task(source, f"kernelbench/{rel[:-3]}"))
    worst = isolated(
        "check_against_reference",
        task_source=source,
        candidates=candidates,
        directory=tmp_path,
        overrides=overrides,
    )
    assert worst <= 1e-4


@pytest.mark.parametrize(
    "params", SYNTHETIC, ids=[f"{p['nd']}d-k{p['k']}s{p['s']}p{p['p']}op{p['op']}" for p in SYNTHETIC]
)
def test_synthetic_parameters_match_reference(params: dict[str, Any], tmp_path: Path) -> None:
    source = SYNTHETIC_TEMPLATE.format(**params)
    candidates = checked_sources(make_task(source, "synthetic"), small_tiles=params["nd"] < 3)
    worst = isolated(
        "check_against_reference", task_source=source, candidates=candidates, directory=tmp_path, overrides={}
    )
    assert worst <= 1e-4
