"""The rules' 3xTF32 implicit-GEMM conv (compute_efficiency.tensor_core_fp32_emulation) against cuDNN's fp32
conv, per distinct conv of the dev-split level1/level2 conv tasks the recipe replaces, for several tile
configurations.

An exploration run, one process on an otherwise idle GPU, fp32 with TF32 off for cuDNN, timed with the
runtime's protocol (kernels_runtime.worker.timing_protocol.time_interleaved: head start, L2 flushed before each
call, median of 20 after 3 warm-ups, interleaved). Each conv runs at its task's default sizes with its
geometry (stride, padding, dilation read from the task's module or call) and the bias the generated file
passes (none when the composed forward moved it into the next kernel); the input is randn, the weight and
bias uniform in +-1/sqrt(fan_in) as nn.Conv initialises them. Each configuration's result is compared with
cuDNN's (allclose at rtol = atol = 1e-4, what the loop's evaluator applies to whole tasks) and both with an
fp64 conv (max abs error). The first configuration is what the generated file's `conv_tiles` picks; the table
says which one was fastest, so the heuristic can follow the measurements. Times include the launcher's
per-call copies (the channels-last input, the re-arranged weight), as the generated file pays them.

Usage (GPU machine): python3 benchmarks/tensor_core_conv.py [KERNELBENCH_DIR] [--configs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import triton

from htam_graph.importers.kernelbench import parse_task
from htam_graph.kernels_runtime.worker import timing_protocol
from htam_graph.model import Task
from htam_graph.rules.base import NotApplicable
from htam_graph.rules.compose.partition import TorchStage
from htam_graph.rules.generator import task_view
from htam_graph.rules.ops import AttrScalar, Const, OpNode, Ref
from htam_graph.rules.recipes.tensor_core.recipe import TensorCoreGemm, tensor_core_op

KB = Path(__file__).resolve().parents[1] / "tests" / "data" / "kernelbench"
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); None: the file's own choice
CONFIGS: list[tuple[int, int, int, int, int] | None] = [
    None,
    (128, 64, 32, 4, 3),
    (128, 128, 32, 8, 3),
    (128, 64, 64, 4, 3),
    (256, 64, 32, 8, 3),
    (64, 64, 32, 4, 4),
]


@dataclass(frozen=True)
class Conv:
    """One conv as the generated file calls it."""

    op: str  # conv1d / conv2d / conv3d
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    bias: bool
    stride: Any
    padding: Any
    dilation: Any

    def describe(self) -> str:
        geometry = f"s{self.stride} p{self.padding} d{self.dilation}".replace(" ", "")
        x, w = "x".join(map(str, self.x_shape)), "x".join(map(str, self.w_shape))
        return f"{self.op} x {x}, w {w}{' +b' if self.bias else ''}, {geometry}"


def convs(kb: Path) -> list[tuple[str, Conv]]:
    """(task, conv) of every conv the recipe replaces in the level1/level2 conv tasks."""
    recipe = TensorCoreGemm()
    found = []
    for level in ("level1", "level2"):
        for path in sorted((kb / level).glob("*.py")):
            if "conv" not in path.name.lower():
                continue
            task = parse_task(path, kb)
            if not isinstance(task, Task):
                continue
            try:
                view = task_view(task)
                plan = recipe.plan(view)
            except NotApplicable:
                continue
            model = None
            for stage in plan.stages:
                if isinstance(stage, TorchStage) and tensor_core_op(view, plan.graph, stage.node) == "conv":
                    model = model or meta_model(task)
                    found.append((f"{level}/{path.stem}", conv_of(plan.graph.shape_of, stage.node, model)))
    return found


def meta_model(task: Task) -> torch.nn.Module:
    """The task's Model built on the meta device (its conv modules hold the geometry)."""
    namespace: dict[str, Any] = {}
    exec(compile(task.source, task.name, "exec"), namespace)  # noqa: S102 - the dev split's own task files
    with torch.device("meta"):
        model: torch.nn.Module = namespace["Model"](*namespace["get_init_inputs"]())
    return model


def conv_of(shape_of: Callable[[str], tuple[int, ...]], node: OpNode, model: torch.nn.Module) -> Conv:
    x, w = node.operands[0], node.operands[1]
    assert isinstance(x, Ref) and isinstance(w, Ref)
    bias = len(node.operands) > 2 and isinstance(node.operands[2], Ref)
    if node.module_path is not None:
        module = model.get_submodule(node.module_path)
        geometry = [getattr(module, a) for a in ("stride", "padding", "dilation")]
    else:
        params = dict(node.params)
        geometry = []
        for name, default in (("stride", 1), ("padding", 0), ("dilation", 1)):
            value = params.get(name, Const(default))
            geometry.append(value.value if isinstance(value, Const | AttrScalar) else default)
    return Conv(node.op, shape_of(x.name), shape_of(w.name), bias, *geometry)


def launcher(kb: Path, directory: Path) -> ModuleType:
    """A generated file of the recipe with the conv kernel (the same in every file), imported."""
    task = parse_task(kb / "level1" / "50_conv_standard_2D__square_input__square_kernel.py", kb)
    assert isinstance(task, Task)
    recipe = TensorCoreGemm()
    path = directory / "tensor_core_conv_candidate.py"
    path.write_text(recipe.emit(task_view(task), recipe.default_config), encoding="utf-8")
    sys.path.insert(0, str(directory))
    import tensor_core_conv_candidate  # type: ignore[import-not-found]

    return tensor_core_conv_candidate


def operands(conv: Conv) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """randn input; weight and bias uniform in +-1/sqrt(fan_in) (nn.Conv's initialisation)."""
    torch.manual_seed(0)
    fan_in = 1
    for size in conv.w_shape[1:]:
        fan_in *= size
    with torch.device("cuda"):
        x = torch.randn(conv.x_shape)
        w = (torch.rand(conv.w_shape) * 2 - 1).div_(fan_in**0.5)
        b = (torch.rand(conv.w_shape[0]) * 2 - 1).div_(fan_in**0.5) if conv.bias else None
    return x, w, b


def measure(
    module: ModuleType,
    default_tiles: object,
    configs: dict[str, tuple[int, int, int, int, int] | None],
    conv: Conv,
) -> tuple[dict[str, float], list[float], list[bool]]:
    """Median ms of cuDNN and of each configuration that fits in shared memory (by name), the max abs errors
    against an fp64 conv (cuDNN first, None-free), and whether each configuration is allclose to cuDNN."""
    x, w, b = operands(conv)
    fn = getattr(torch.nn.functional, conv.op)
    geometry = (conv.stride, conv.padding, conv.dilation)
    exact = fn(x.double(), w.double(), b.double() if b is not None else None, *geometry)
    cudnn = fn(x, w, b, *geometry)
    fns = {"cudnn": lambda: fn(x, w, b, *geometry)}
    errors = [(cudnn - exact).abs().max().item()]
    ok = []
    for name, config in configs.items():
        run = _with_tiles(module, default_tiles, config, x, w, b, geometry)
        try:
            got = run()
        except triton.runtime.errors.OutOfResources:  # the tiles need more shared memory than there is
            continue
        errors.append((got - exact).abs().max().item())
        ok.append(bool(torch.allclose(got, cudnn, rtol=1e-4, atol=1e-4)))
        fns[name] = run
    del exact, cudnn
    timings = timing_protocol.time_interleaved(fns, torch.device("cuda"), runs=20, warmup=3)
    return {n: statistics.median(v) / 1000 for n, v in timings.samples_us.items()}, errors, ok


def _with_tiles(
    module: ModuleType,
    default: object,
    config: tuple[int, ...] | None,
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    geometry: tuple[Any, Any, Any],
) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        module.conv_tiles = default if config is None else (lambda m, n, c, k: config)
        out: torch.Tensor = module.tf32x3_conv(x, w, b, *geometry)
        return out

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("kb", nargs="?", default=KB, type=Path)
    parser.add_argument("--configs", type=int, default=len(CONFIGS))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tensor_core_conv.py: needs a CUDA GPU (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, fp32, TF32 off"
    )
    with tempfile.TemporaryDirectory() as tmp:
        module = launcher(args.kb, Path(tmp))
        default_tiles = module.conv_tiles
        configs = CONFIGS[: args.configs]
        names = ["own choice" if c is None else "x".join(map(str, c)) for c in configs]
        print(
            "| task | conv | cuDNN fp32 ms | "
            + " | ".join(names)
            + " | best | allclose to cuDNN at 1e-4 | max abs error vs fp64: cuDNN / 3xTF32 (worst) |"
        )
        print("|---|---|---:|" + "---:|" * len(configs) + "---|---|---|")
        speedups = []
        seen: dict[Conv, str] = {}
        for task, conv in convs(args.kb):
            if conv in seen:
                print(f"| {task} | same conv as {seen[conv]} | | " + " | " * len(configs) + " | |")
                continue
            seen[conv] = task
            ms, errors, ok = measure(module, default_tiles, dict(zip(names, configs, strict=True)), conv)
            best = min(ms, key=lambda n: ms[n])
            speedups.append(ms["cudnn"] / ms[names[0]])
            cells = " | ".join(
                f"{ms[n]:,.3f} ({ms['cudnn'] / ms[n]:.2f}x)" if n in ms else "out of shared memory"
                for n in names
            )
            err = f"{errors[0]:.1e} / {max(errors[1:]):.1e}"
            print(
                f"| {task} | {conv.describe()} | {ms['cudnn']:,.3f} | {cells} | {best} | {all(ok)} | {err} |"
            )
            sys.stdout.flush()
            torch.cuda.empty_cache()
        geo = statistics.geometric_mean(speedups) if speedups else float("nan")
        print(
            f"\ngeomean speed-up of the file's own choice over cuDNN fp32: {geo:.3f}x over {len(speedups)} convs"
        )


if __name__ == "__main__":
    main()
