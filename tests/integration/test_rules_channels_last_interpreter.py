"""Channels-last conv rule kernels run under TRITON_INTERPRET=1 on the CPU and match Model.

For dev-split tasks `library_offload.channels_last_conv` applies to (depthwise, depthwise-separable, standard,
transposed, 3D, with and without an epilogue): generate, then run ModelNew against Model at small sizes (same
seed for both constructors; channel counts chosen so channel tiles are partial or several), on three input
sets: the task's own inputs, a signed copy (x * 6 - 3) and a signed copy with a mean offset. allclose at
rtol=atol=1e-4 (fp32; PyTorch's CPU convolutions also run channels-last). The child also checks that the conv
weights are channels-last after construction and after load_state_dict, and that the result is contiguous.
Both layouts the launcher accepts (channels-last and NCHW conv output) are checked directly as well.
Each check runs in a fresh process with TRITON_INTERPRET=1 set before triton is imported.
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

INTERP_CHILD = Path(__file__).with_name("interp_child.py")  # the shared child-process runner
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
KEY = "library_offload.channels_last_conv"

# (task, small sizes)
CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
        {"batch_size": 2, "in_channels": 5, "width": 13, "height": 11},
    ),
    (
        "level1/86_conv_depthwise_separable_2D.py",
        {"batch_size": 2, "in_channels": 5, "out_channels": 37, "width": 12, "height": 10},
    ),
    (  # standard conv, dilated and padded (level1/50 reads a fixed 224x224 input: too big for the interpreter)
        "level1/80_conv_standard_2D_square_input_asymmetric_kernel___dilated____padded__.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "width": 19, "height": 17},
    ),
    (
        "level1/54_conv_standard_3D__square_input__square_kernel.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 5, "width": 6, "height": 7},
    ),
    (
        "level2/4_Conv2d_Mish_Mish.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 40, "height": 12, "width": 12},
    ),
    (
        "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 6, "width": 7},
    ),
    (
        "level2/20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py",
        {
            "batch_size": 2,
            "in_channels": 3,
            "out_channels": 5,
            "depth": 3,
            "height": 4,
            "width": 5,
        },
    ),
]


def make_task(rel: str) -> Task:
    source = (KB / rel).read_text(encoding="utf-8")
    return Task(
        key=f"kernelbench/{rel[:-3]}",
        suite="kernelbench",
        level=None,
        name=rel,
        source=source,
        source_sha256="0" * 64,
    )


def conv_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    convs = (torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
    return [m.weight for m in model.modules() if isinstance(m, convs)]


def channels_last(t: torch.Tensor) -> bool:
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return t.is_contiguous(memory_format=fmt)


def check_against_reference(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any]
) -> float:
    """Every candidate against Model on three input sets; returns the worst max abs error."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for candidate_source in candidates:
        cand = import_candidate(candidate_source, directory)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
        weights = conv_weights(model_new)
        assert weights and all(channels_last(w) for w in weights), "weights not channels-last after __init__"
        ref_state, new_state = model.state_dict(), model_new.state_dict()
        assert list(ref_state) == list(new_state)
        assert all(torch.equal(ref_state[k], new_state[k]) for k in ref_state)
        model_new.load_state_dict(ref_state)  # what the evaluator does: the layout must survive it
        assert all(channels_last(w) for w in conv_weights(model_new)), "load_state_dict lost the layout"
        for inputs in (own, [x * 6 - 3 for x in own], [x * 6 - 3 + 10 for x in own]):
            with torch.no_grad():
                expected = model(*[x.clone() for x in inputs])
                kept = [x.clone() for x in inputs]
                got = model_new(*inputs)
            assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True)), "inputs changed"
            assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
            assert got.is_contiguous() and got.stride() == expected.stride()
            assert expected.std() > 0, "degenerate reference output at this size"
            err = (got - expected).abs().max().item()
            assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
            worst = max(worst, err)
    return worst


def check_both_layouts(task_source: str, candidate: str, directory: Path, overrides: dict[str, Any]) -> int:
    """Call the generated launcher on the reference's conv output, channels-last and NCHW: both must give the
    reference's result. Returns how many layouts were checked."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    torch.manual_seed(1)
    (x,) = ref_mod.get_inputs()
    cand = import_candidate(candidate, directory)
    launcher = next(getattr(cand, n) for n in dir(cand) if n.endswith("_nchw_epilogue"))
    with torch.no_grad():
        expected = model(x)
        conv_out = model.conv_transpose(x)
    fmt = torch.channels_last if conv_out.dim() == 4 else torch.channels_last_3d
    extra = [float(model.scaling_factor)] if hasattr(model, "scaling_factor") else []
    for y in (conv_out.contiguous(), conv_out.contiguous(memory_format=fmt)):
        got = launcher(y, model.bias, *extra)
        assert got.is_contiguous()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), (got - expected).abs().max().item()
    return 2


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


def emit(task: Task, config: KernelConfig | None = None) -> str:
    recipe = default_recipes()[KEY]
    return recipe.emit(task_view(task), config or recipe.default_config)  # type: ignore[arg-type]


@pytest.mark.parametrize(("rel", "overrides"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_generated_kernel_matches_reference(rel: str, overrides: dict[str, Any], tmp_path: Path) -> None:
    task = make_task(rel)
    assert KEY in RulesGenerator().recipes_for(task)
    source = emit(task)
    header = parse_header(source)
    assert header is not None and header.recipe == KEY
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.has_triton_kernel and report.violations == []
    # BLOCK=64: at most 32 channels x 2 positions per tile, so tiles are partial along both axes
    small = emit(task, KernelConfig(block=64, num_warps=2))
    isolated(
        "check_against_reference",
        task_source=task.source,
        candidates=[source, small],
        directory=tmp_path,
        overrides=overrides,
    )


@pytest.mark.parametrize("index", [5, 6], ids=["transpose2d_bias_scale", "transpose3d_residual"])
def test_launcher_reads_channels_last_and_nchw_conv_outputs(index: int, tmp_path: Path) -> None:
    rel, overrides = CASES[index]
    task = make_task(rel)
    checked = isolated(
        "check_both_layouts",
        task_source=task.source,
        candidate=emit(task, KernelConfig(block=64, num_warps=2)),
        directory=tmp_path,
        overrides=overrides,
    )
    assert checked == 2
