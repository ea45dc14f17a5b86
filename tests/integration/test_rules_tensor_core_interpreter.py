"""compute_efficiency.tensor_core_fp32_emulation: the 3xTF32 GEMM kernel runs under TRITON_INTERPRET=1 on the
CPU and matches torch.matmul at 1e-4, for every operand form the launcher takes; whole generated files match
their Model, and one passes the real evaluator.

The models are this test's own small modules (not benchmark tasks). Their analysed sizes are large enough
for the recipe to apply (it keeps small GEMMs on cuBLAS); the checks then run them at small sizes, since every
size of a generated file is read from its tensors at run time. The interpreter computes `tl.dot` in fp32, so
these tests prove the indexing (strides, batches, split K, edges, bias), not the 3xTF32 rounding: the H200
measurements check that at the task's tolerance.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
import torch

from htam_graph.kernels_runtime.parent.corpus import shrink_task
from htam_graph.kernels_runtime.static_checks import analyse as static_analyse
from htam_graph.model import PrecisionPolicy, Task
from htam_graph.rules import RulesGenerator
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes.tensor_core.recipe import KEY, TensorCoreGemm

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]
load_sibling = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"]
rev = load_sibling("recipe_evaluation")
composed_checks = load_sibling("composed_checks")

LINEAR_CHAIN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out, scale):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.scale = scale

    def forward(self, x):
        x = self.fc(x)
        x = torch.sigmoid(x) * self.scale
        return torch.logsumexp(x, dim=1)


rows, n_in, n_out, scale = 512, 1024, 768, 1.5


def get_inputs():
    return [torch.randn(rows, n_in)]


def get_init_inputs():
    return [n_in, n_out, scale]
"""

TRANSPOSED_PRODUCT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.T, b)


k, m, n = 512, 640, 640


def get_inputs():
    return [torch.randn(k, m), torch.randn(k, n)]


def get_init_inputs():
    return []
"""

BATCHED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(torch.bmm(a, b))


batch, m, k, n = 8, 512, 256, 256


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return []
"""

MODELS = {"linear-chain": LINEAR_CHAIN, "transposed": TRANSPOSED_PRODUCT, "batched": BATCHED}
SMALL = {
    "linear-chain": {"rows": 37, "n_in": 70, "n_out": 130},
    "transposed": {"k": 67, "m": 45, "n": 150},
    "batched": {"batch": 3, "m": 40, "k": 33, "n": 72},
}


def own_task(name: str) -> Task:
    return Task(
        key=f"own/tensor_core_{name}",
        suite="own",
        level=None,
        name=name,
        source=MODELS[name],
        source_sha256="0" * 64,
    )


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a process with TRITON_INTERPRET=1 set before any import."""
    return runpy.run_path(str(INTERP_CHILD))["run_isolated"](__file__, function, kwargs)


def launcher_cases(candidate: str, directory: Path) -> list[str]:
    """tf32x3_matmul against torch.matmul on every operand form; returns the names of the cases run."""
    module = import_candidate(candidate, directory)
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    bias = rand(72)
    cases = {
        "plain": (rand(50, 40), rand(40, 72), None),
        "transposed views": (rand(40, 50).T, rand(72, 40).T, None),
        "bias": (rand(50, 40), rand(40, 72), bias),
        "3-D by 2-D": (rand(3, 20, 40), rand(40, 72), bias),
        "batched": (rand(3, 20, 40), rand(3, 40, 72), None),
        "2-D broadcast over a batch": (rand(20, 40), rand(3, 40, 72), None),
        "4-D batched": (rand(2, 3, 17, 40), rand(2, 3, 40, 72), None),
        "split K": (rand(64, 8192), rand(8192, 64), rand(64)),  # 1 tile on the CPU: K is split
        "K not a multiple of the tile": (rand(33, 77), rand(77, 130), None),
    }
    for name, (a, b, c) in cases.items():
        expected = torch.matmul(a, b) + (c if c is not None else 0)
        got = module.tf32x3_matmul(a, b, c)
        assert got.shape == expected.shape, f"{name}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
        err = (got - expected).abs().max().item()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"{name}: max abs error {err}"
    try:
        module.tf32x3_matmul(rand(3, 4, 5), rand(2, 5, 6))
    except ValueError as e:
        assert "batch dims" in str(e), str(e)
    else:
        raise AssertionError("different batch dims must be refused")
    return list(cases)


def emit(name: str) -> str:
    task = own_task(name)
    assert KEY in RulesGenerator().recipes_for(task)
    recipe = TensorCoreGemm()
    return recipe.emit(task_view(task), recipe.default_config)


def test_the_gemm_launcher_matches_torch_matmul_on_every_operand_form(tmp_path: Path) -> None:
    ran = isolated("launcher_cases", candidate=emit("transposed"), directory=tmp_path)
    assert len(ran) == 9


@pytest.mark.parametrize("name", list(MODELS))
def test_generated_file_matches_its_model(name: str, tmp_path: Path) -> None:
    source = emit(name)
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.defines_model_new and report.violations == []
    assert 'input_precision="tf32x3"' in source and "tf32x3_matmul(" in source.split("def forward", 1)[1]
    # the generated file reads every size at run time: it runs the model re-bound to small sizes
    [worst] = composed_checks.run_checks([shrink_task(MODELS[name], SMALL[name])], [source], tmp_path)
    assert worst < 1e-3


def test_the_linear_chain_passes_the_real_evaluator() -> None:
    task = own_task("linear-chain")
    rev.assert_correct_in_real_evaluator(task, emit("linear-chain"))


@pytest.mark.parametrize(
    ("sizes", "why"),
    [
        ({"m": 640, "n": 1}, "a matrix-vector product is memory-bound"),
        ({"m": 32, "n": 640}, "M below 64"),
        ({"m": 256, "n": 640, "k": 4096}, "B needs a K-major copy and M < 512"),
        ({"m": 128, "n": 128, "k": 128}, "too few multiply-adds"),
    ],
    ids=["matvec", "thin", "copy-not-hidden", "small"],
)
def test_cublas_stays_where_the_kernel_does_not_pay_off(sizes: dict[str, int], why: str) -> None:
    values = {"k": 512, "m": 640, "n": 640} | sizes
    source = (
        TRANSPOSED_PRODUCT.replace("a.T, b", "a, b")
        .replace("k, m, n = 512, 640, 640", f"k, m, n = {values['k']}, {values['m']}, {values['n']}")
        .replace("torch.randn(k, m)", "torch.randn(m, k)")
    )
    task = Task(key="own/t", suite="own", level=None, name="t", source=source, source_sha256="0" * 64)
    verdict = RulesGenerator().applies(KEY, task)
    assert not verdict, why
    assert "compute-bound" in verdict.reason
