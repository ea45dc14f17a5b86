"""The rules' 3xTF32 GEMM (compute_efficiency.tensor_core_fp32_emulation) against cuBLAS's fp32 GEMM, per GEMM
of the dev-split tasks the recipe applies to, for several tile configurations.

An exploration run, one process on an otherwise idle GPU, fp32 with TF32 off for cuBLAS, timed with the
runtime's protocol (kernels_runtime.worker.timing_protocol.time_interleaved: head start, L2 flushed before each
call, median of 20 after 3 warm-ups, interleaved). The operands are the task's own forms at its default sizes
(nn.Linear: x @ W.t(); A.T views as the task writes them). Each configuration's result is compared with
cuBLAS's (allclose at rtol = atol = 1e-4, what the loop's evaluator applies to whole tasks) and both with an
fp64 product (max abs error). The first configuration is what the generated file's `gemm_tiles` picks; the table says
which one was fastest, so the heuristic can follow the measurements.

Usage (GPU machine): python benchmarks/tensor_core_gemm.py [KERNELBENCH_DIR] [--configs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import torch
import triton

from htam_graph.importers.kernelbench import parse_task
from htam_graph.kernels_runtime.worker import timing_protocol
from htam_graph.model import Task
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.compose.partition import TorchStage
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes.tensor_core.gemm import compute_bound, gemm_size
from htam_graph.rules.recipes.tensor_core.recipe import TensorCoreGemm

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); None: the file's own choice
CONFIGS: list[tuple[int, int, int, int, int] | None] = [
    None,
    (128, 128, 32, 8, 3),
    (128, 128, 32, 8, 4),
    (128, 256, 32, 8, 3),
    (256, 128, 32, 8, 3),
    (128, 128, 64, 4, 3),
]


def gemms(kb: Path) -> list[tuple[str, str, tuple[int, int, int, int]]]:
    """(task, op, (batch, M, N, K)) of every compute-bound GEMM of the tasks the recipe applies to."""
    recipe = TensorCoreGemm()
    found = []
    for level in ("level1", "level2"):
        for path in sorted((kb / level).glob("*.py")):
            task = parse_task(path, kb)
            if not isinstance(task, Task) or not applicable(recipe, task):
                continue
            plan = recipe.plan(task_view(task))
            for stage in plan.stages:
                if isinstance(stage, TorchStage) and compute_bound(plan.graph, stage.node):
                    found.append((f"{level}/{path.stem}", stage.node.op, gemm_size(plan.graph, stage.node)))
    return found


def applicable(recipe: TensorCoreGemm, task: Task) -> bool:
    try:
        return bool(recipe.check(task_view(task)))
    except NotApplicable:  # the task's forward cannot be analysed
        return False


def launcher(kb: Path, directory: Path) -> ModuleType:
    """A generated file of the recipe (its kernel and launcher are the same in every file), imported."""
    task = parse_task(kb / "level1" / "2_Standard_matrix_multiplication_.py", kb)
    assert isinstance(task, Task)
    recipe = TensorCoreGemm()
    path = directory / "tensor_core_gemm_candidate.py"
    path.write_text(recipe.emit(task_view(task), recipe.default_config), encoding="utf-8")
    sys.path.insert(0, str(directory))
    import tensor_core_gemm_candidate  # type: ignore[import-not-found]

    return tensor_core_gemm_candidate


def operands(op: str, size: tuple[int, int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Operands in the task's value range: torch.rand for matmul tasks; x = rand and nn.Linear's weight
    initialisation (uniform in +-1/sqrt(K)) for linear ones, multiplied as x @ W.t()."""
    batch, m, n, k = size
    torch.manual_seed(0)
    with torch.device("cuda"):
        if op == "linear":
            return torch.rand(m, k), (torch.rand(n, k) * 2 - 1).div_(k**0.5).t()
        if batch == 1:
            return torch.rand(m, k), torch.rand(k, n)
        return torch.rand(batch, m, k), torch.rand(batch, k, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kb", nargs="?", default="tests/data/kernelbench", type=Path)
    parser.add_argument("--configs", type=int, default=len(CONFIGS))
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, fp32, TF32 off for cuBLAS")
    with tempfile.TemporaryDirectory() as tmp:
        module = launcher(args.kb, Path(tmp))
        default_tiles = module.gemm_tiles
        configs = CONFIGS[: args.configs]
        names = ["own choice" if c is None else "x".join(map(str, c)) for c in configs]
        print(
            "| task | op | batch x M x N x K | cuBLAS fp32 µs | "
            + " | ".join(names)
            + " | best | allclose to cuBLAS at 1e-4 | max abs error vs fp64: cuBLAS / 3xTF32 (worst) |"
        )
        print("|---|---|---|---:|" + "---:|" * len(configs) + "---|---|---|")
        speedups = []
        seen: dict[tuple[str, tuple[int, int, int, int]], str] = {}
        for task, op, size in gemms(args.kb):
            key = (op, size)
            if key in seen:
                print(f"| {task} | {op} | same GEMM as {seen[key]} | | " + " | " * len(configs) + " | |")
                continue
            seen[key] = task
            us, errors, ok = measure(module, default_tiles, dict(zip(names, configs, strict=True)), op, size)
            best = min(us, key=lambda n: us[n])
            speedups.append(us["cublas"] / us[names[0]])
            cells = " | ".join(
                f"{us[n]:,.1f} ({us['cublas'] / us[n]:.2f}x)" if n in us else "out of shared memory"
                for n in names
            )
            dims = "x".join(map(str, size))
            err = f"{errors[0]:.1e} / {max(errors[1:]):.1e}"
            print(f"| {task} | {op} | {dims} | {us['cublas']:,.1f} | {cells} | {best} | {all(ok)} | {err} |")
            torch.cuda.empty_cache()
        geo = statistics.geometric_mean(speedups) if speedups else float("nan")
        print(
            f"\ngeomean speed-up of the file's own choice over cuBLAS fp32: {geo:.3f}x over {len(speedups)} GEMMs"
        )


def measure(
    module: ModuleType,
    default_tiles: object,
    configs: dict[str, tuple[int, int, int, int, int] | None],
    op: str,
    size: tuple[int, int, int, int],
) -> tuple[dict[str, float], list[float], list[bool]]:
    """Median µs of cuBLAS and of each configuration that fits in shared memory (by name), the max abs errors
    against an fp64 product (cuBLAS first), and whether each configuration is allclose to cuBLAS at 1e-4."""
    a, b = operands(op, size)
    exact = torch.matmul(a.double(), b.double())
    cublas = torch.matmul(a, b)
    fns = {"cublas": lambda: torch.matmul(a, b)}
    errors = [(cublas - exact).abs().max().item()]
    ok = []
    for name, config in configs.items():
        try:
            got = _with_tiles(module, default_tiles, config, a, b)
        except triton.runtime.errors.OutOfResources:  # the tiles need more shared memory than there is
            continue
        errors.append((got - exact).abs().max().item())
        ok.append(bool(torch.allclose(got, cublas, rtol=1e-4, atol=1e-4)))
        fns[name] = lambda c=config: _with_tiles(module, default_tiles, c, a, b)
    timings = timing_protocol.time_interleaved(fns, torch.device("cuda"), runs=20, warmup=3)
    return {n: statistics.median(v) for n, v in timings.samples_us.items()}, errors, ok


def _with_tiles(
    module: ModuleType, default: object, config: tuple[int, ...] | None, a: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    module.gemm_tiles = default if config is None else (lambda m, n, k: config)
    return module.tf32x3_matmul(a, b)


if __name__ == "__main__":
    main()
