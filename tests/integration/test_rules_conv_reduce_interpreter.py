"""fusion.conv_reduction_epilogue kernels run under TRITON_INTERPRET=1 on the CPU and match Model.

For each dev-split task the recipe applies to: generate, then run ModelNew against Model at small sizes (module
constants overridden per task), same seed for both constructors, on three input sets: the task's own inputs, a
signed copy (x * 6 - 3) and a signed copy with a large mean (exposes variance cancellation in the norms).
allclose(rtol=1e-4, atol=1e-4). Each file is run with the default config and with a 16-element tile (several
tiles per sample, masked tails, several spatial partials). Batch norm is checked in training mode (output and
updated running statistics) and in eval mode. Every check runs in a fresh child process with
TRITON_INTERPRET=1 set before triton is imported .
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
KEY = "fusion.conv_reduction_epilogue"
# (task, small sizes): channels stay > 16 somewhere so that padded channel lanes are exercised
CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "level2/6_Conv3d_Softmax_MaxPool_MaxPool.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 7, "height": 11, "width": 10},
    ),
    (
        "level2/8_Conv3d_Divide_Max_GlobalAvgPool_BiasAdd_Sum.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "depth": 6, "height": 9, "width": 8},
    ),
    (
        "level2/10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 9, "width": 8},
    ),
    (
        "level2/32_Conv2d_Scaling_Min.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 7, "height": 10, "width": 9},
    ),
    (
        "level2/42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 8, "width": 7},
    ),
    (
        "level2/44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 5, "width": 6},
    ),
    (
        "level2/52_Conv2d_Activation_BatchNorm.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 9, "width": 8},
    ),
    (
        "level2/72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 4, "height": 5, "width": 6},
    ),
    (
        "level2/78_ConvTranspose3d_Max_Max_Sum.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 4, "height": 5, "width": 4},
    ),
    (
        "level2/92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 8, "groups": 4, "height": 9, "width": 8},
    ),
    (
        "level2/96_ConvTranspose3d_Multiply_Max_GlobalAvgPool_Clamp.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 3, "height": 5, "width": 4},
    ),
    (
        "level2/24_Conv3d_Min_Softmax.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "D": 6, "H": 5, "W": 7},
    ),
    (
        "level2/36_ConvTranspose2d_Min_Sum_GELU_Add.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 5, "width": 6},
    ),
    # also covered by the pooling / norm / logsumexp recipes; the channel-tile kernel must be right on them too
    (
        "level2/46_Conv2d_Subtract_Tanh_Subtract_AvgPool.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 9, "width": 8},
    ),
    (
        "level2/50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling.py",
        {"batch_size": 2, "in_channels": 3, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level2/58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 5, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level2/60_ConvTranspose3d_Swish_GroupNorm_HardSwish.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 8, "depth": 3, "height": 4, "width": 5},
    ),
    (
        "level2/74_ConvTranspose3d_LeakyReLU_Multiply_LeakyReLU_Max.py",
        {"batch_size": 2, "in_channels": 3, "depth": 2, "height": 3, "width": 4},
    ),
    (
        "level2/82_Conv2d_Tanh_Scaling_BiasAdd_Max.py",
        {"batch_size": 2, "in_channels": 3, "height": 11, "width": 10},
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


def assert_clean_static(source: str) -> None:
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None
    assert report.defines_model_new and report.has_triton_kernel
    assert report.violations == []


def _input_sets(own: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    def each(f: Any) -> list[torch.Tensor]:
        return [f(x) if x.is_floating_point() else x for x in own]

    return [own, each(lambda x: x * 6 - 3), each(lambda x: x * 6 - 3 + 10)]


def check_against_reference(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any]
) -> float:
    """Every candidate against Model on three input sets, training then eval mode; the worst abs error."""
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for candidate_source in candidates:
        cand = import_candidate(candidate_source, directory)
        torch.manual_seed(0)
        model = ref_mod.Model(*init)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
        has_batch_norm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
        for training in (True, False) if has_batch_norm else (True,):  # the mode matters to batch norm only
            model.train(training)
            model_new.train(training)
            for index, inputs in enumerate(_input_sets(own)):
                with torch.no_grad():
                    expected = model(*[x.clone() for x in inputs])
                    got = model_new(*inputs)
                assert (
                    type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
                )
                # the task's own inputs must give a non-constant output (shifted ones may saturate, e.g. GELU)
                assert index > 0 or expected.float().std() > 0, "degenerate reference output"
                err = (got - expected).abs().max().item()
                assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
                worst = max(worst, err)
                # side effects (batch norm running statistics) must match as well
                ref_state, new_state = model.state_dict(), model_new.state_dict()
                assert list(ref_state) == list(new_state)
                for k in ref_state:
                    assert torch.allclose(ref_state[k].float(), new_state[k].float(), rtol=1e-4, atol=1e-5), k
    return worst


@pytest.mark.parametrize(("rel", "overrides"), CASES, ids=[c[0].split("/")[1].split("_")[0] for c in CASES])
def test_generated_kernel_matches_reference(rel: str, overrides: dict[str, Any], tmp_path: Path) -> None:
    task = make_task(rel)
    assert KEY in RulesGenerator().recipes_for(task)
    recipe = default_recipes()[KEY]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    header = parse_header(source)
    assert header is not None and header.recipe == KEY
    assert_clean_static(source)
    small = recipe.emit(task_view(task), KernelConfig(block=16, num_warps=2, max_single_block=16))  # type: ignore[arg-type]
    worst = isolated(
        "check_against_reference",
        task_source=task.source,
        candidates=[source, small],
        directory=tmp_path,
        overrides=overrides,
    )
    assert worst <= 1e-4


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


def test_coverage_of_the_dev_split() -> None:
    """recipes_for over level1 + level2 offers this recipe for exactly the tasks listed in CASES."""
    generator = RulesGenerator()
    found = set()
    for path in sorted([*KB.glob("level1/*.py"), *KB.glob("level2/*.py")]):
        rel = str(path.relative_to(KB))
        if KEY in generator.recipes_for(make_task(rel)):
            found.add(rel)
    assert found == {rel for rel, _ in CASES}
