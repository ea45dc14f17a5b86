"""GEMM + row-reduction rule kernels (fusion.reduction_with_epilogue, algebraic_rewrite.reduce_before_linear)
run under TRITON_INTERPRET=1 on the CPU and match Model at small sizes.

Reference and candidate are built after the same seed (same weights) and each forward runs right after the same
seed (so training-mode dropout draws the same mask in both). Three input sets: the task's own inputs, a signed
copy (x * 6 - 3) and a shifted copy (x * 6 - 3 + 10); allclose(rtol=1e-4, atol=1e-4). Batch-norm models run
in training mode (as KernelBench leaves them), so their running statistics must also match after the forwards;
then both models are switched to eval mode (identity dropout, running statistics) and compared once more.
Each check runs in a fresh child process with TRITON_INTERPRET=1 set before triton is imported.
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
from htam_graph.rules import RulesGenerator, parse_header
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes import default_recipes

INTERP_CHILD = Path(__file__).with_name("interp_child.py")  # the shared child-process runner
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
ROW = "fusion.reduction_with_epilogue"
GEMV = "algebraic_rewrite.reduce_before_linear"

_GEMM = {"batch_size": 5, "in_features": 24, "out_features": 40}
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("level2/14_Gemm_Divide_Sum_Scaling.py", ROW, {"batch_size": 5, "input_size": 24, "hidden_size": 40}),
    ("level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py", ROW, _GEMM),
    ("level2/28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply.py", ROW, _GEMM),
    ("level2/66_Matmul_Dropout_Softmax.py", ROW, _GEMM),
    ("level2/80_Gemm_Max_Subtract_GELU.py", ROW, _GEMM),
    ("level2/84_Gemm_BatchNorm_Scaling_Softmax.py", ROW, {**_GEMM, "batch_size": 37}),
    ("level2/98_Matmul_AvgPool_GELU_Scale_Max.py", ROW, {**_GEMM, "out_features": 72, "pool_kernel_size": 4}),
    # tasks other recipes also cover: the row kernel is one more option there
    (
        "level2/22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py",
        ROW,
        {"batch_size": 5, "input_size": 24, "hidden_size": 40},
    ),
    ("level2/56_Matmul_Sigmoid_Sum.py", ROW, {"batch_size": 5, "input_size": 24, "hidden_size": 40}),
    ("level2/64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU.py", ROW, _GEMM),
    ("level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py", GEMV, _GEMM),
    (
        "level2/98_Matmul_AvgPool_GELU_Scale_Max.py",
        GEMV,
        {**_GEMM, "out_features": 72, "pool_kernel_size": 4},
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


def check_against_reference(
    task_source: str, candidate: str, directory: Path, overrides: dict[str, Any]
) -> float:
    """The candidate against Model on three input sets (fp32, TF32 off); returns the worst max abs error."""
    torch.backends.cuda.matmul.allow_tf32 = False
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(0)
    model = ref_mod.Model(*init)
    cand = import_candidate(candidate, directory)
    torch.manual_seed(0)
    model_new = cand.ModelNew(*init)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), model_new.state_dict().values(), strict=True)
    )
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for step, inputs in enumerate([own, [x * 6 - 3 for x in own], [x * 6 - 3 + 10 for x in own]]):
        with torch.no_grad():
            torch.manual_seed(100 + step)
            expected = model(*[x.clone() for x in inputs])
            torch.manual_seed(100 + step)
            got = model_new(*inputs)
        assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
        err = (got - expected).abs().max().item()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"input set {step}: max abs error {err}"
        worst = max(worst, err)
    for (name, a), b in zip(model.state_dict().items(), model_new.state_dict().values(), strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5), (
            f"state {name} differs after forwards"
        )
    # eval mode: dropout is the identity, batch norm uses the running statistics the forwards above updated
    model.eval()
    model_new.eval()
    with torch.no_grad():
        expected, got = model(*own), model_new(*own)
    err = (got - expected).abs().max().item()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"eval mode: max abs error {err}"
    return max(worst, err)


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs)


@pytest.mark.parametrize(
    ("rel", "key", "overrides"), CASES, ids=[f"{c[0].split('/')[1][:2]}-{c[1].split('.')[0]}" for c in CASES]
)
def test_generated_kernel_matches_reference(
    rel: str, key: str, overrides: dict[str, Any], tmp_path: Path
) -> None:
    task = make_task(rel)
    assert key in RulesGenerator().recipes_for(task)
    recipe = default_recipes()[key]
    source = recipe.emit(task_view(task), recipe.default_config)  # type: ignore[arg-type]
    header = parse_header(source)
    assert header is not None and header.recipe == key
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.defines_model_new and report.violations == []
    # the child asserts allclose on every input set (and equal running statistics); a failure fails this test
    worst = isolated(
        "check_against_reference",
        task_source=task.source,
        candidate=source,
        directory=tmp_path,
        overrides=overrides,
    )
    assert worst < 1e-3
