"""Direct depthwise conv rule kernels run under TRITON_INTERPRET=1 on the CPU and match Model.

For the dev-split tasks `data_reuse.depthwise_conv_direct` applies to (level1/82, 84 with a channel multiplier,
86 depthwise-separable) and synthetic forwards covering what the dev split does not (stride 2, padding,
dilation, bias, asymmetric kernels, padding='same' with an odd total, Conv1d, a functional F.conv2d, a fused
epilogue with per-channel / one-element / full-shape operands and a module scalar): generate, then run
ModelNew against Model at small odd sizes (same seed for both constructors) on three input sets, at
allclose(rtol=1e-4, atol=1e-4). Each candidate is also run with tiny tiles (several row and column blocks,
masked tails), and after both models' weights and biases are changed in place (the kernel must read the
parameters at every call, never a cached copy). Each check runs in a fresh process with TRITON_INTERPRET=1.
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
KEY = "data_reuse.depthwise_conv_direct"

# (task, small sizes)
KB_CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "level1/82_conv_depthwise_2D_square_input_square_kernel.py",
        {"batch_size": 2, "in_channels": 5, "width": 13, "height": 11},
    ),
    (  # out_channels = 2 * in_channels: channel multiplier 2
        "level1/84_conv_depthwise_2D_asymmetric_input_square_kernel.py",
        {"batch_size": 2, "in_channels": 3, "out_channels": 6, "width_in": 17, "height_in": 9},
    ),
    (
        "level1/86_conv_depthwise_separable_2D.py",
        {"batch_size": 2, "in_channels": 5, "out_channels": 7, "width": 12, "height": 10},
    ),
]

_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"


def _synthetic(init: str, forward: str, inputs: str) -> str:
    return (
        f"{_HEAD}    def __init__(self):\n        super().__init__()\n{init}\n\n"
        f"    def forward(self, x):\n{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


SYNTHETIC: dict[str, str] = {
    "stride2_pad_dilation_bias": _synthetic(
        "        self.conv = nn.Conv2d(4, 4, 3, stride=2, padding=2, dilation=2, groups=4, bias=True)",
        "        return self.conv(x)",
        "torch.randn(2, 4, 13, 11)",
    ),
    "asymmetric_kernel_stride_padding_mult3": _synthetic(
        "        self.conv = nn.Conv2d(3, 9, (3, 5), stride=(2, 1), padding=(1, 2), groups=3, bias=True)",
        "        return self.conv(x)",
        "torch.randn(2, 3, 9, 14)",
    ),
    "padding_same_even_kernel": _synthetic(
        "        self.conv = nn.Conv2d(3, 3, (4, 2), padding='same', dilation=(1, 3), groups=3, bias=False)",
        "        return self.conv(x)",
        "torch.randn(2, 3, 7, 10)",
    ),
    "conv1d_stride_dilation_bias": _synthetic(
        "        self.conv = nn.Conv1d(6, 6, 5, stride=2, padding=3, dilation=2, groups=6, bias=True)",
        "        return self.conv(x)",
        "torch.randn(3, 6, 37)",
    ),
    "epilogue_per_channel_scalar_full": _synthetic(
        "        self.conv = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=True)\n"
        "        self.scale = nn.Parameter(torch.randn(4, 1, 1))\n"
        "        self.shift = nn.Parameter(torch.randn(()))\n"
        "        self.slope = 0.2",
        "        y = self.conv(x)\n"
        "        y = F.leaky_relu(y * self.scale + self.shift, self.slope)\n"
        "        return torch.sigmoid(y) + x",
        "torch.randn(2, 4, 9, 11)",
    ),
    "functional_conv_with_parameters": _synthetic(
        "        self.weight = nn.Parameter(torch.randn(5, 1, 3, 3))\n"
        "        self.bias = nn.Parameter(torch.randn(5))",
        "        return torch.relu(F.conv2d(x, self.weight, self.bias, stride=2, padding=1, groups=5))",
        "torch.randn(2, 5, 10, 9)",
    ),
    "separable_with_epilogue_between": _synthetic(
        "        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=True)\n"
        "        self.pointwise = nn.Conv2d(4, 6, 1, bias=True)",
        "        y = torch.relu(self.depthwise(x))\n        return self.pointwise(y)",
        "torch.randn(2, 4, 8, 9)",
    ),
}


def make_task(source: str, key: str) -> Task:
    return Task(key=key, suite="kernelbench", level=None, name=key, source=source, source_sha256="0" * 64)


def _compare(model: Any, model_new: Any, inputs: list[torch.Tensor]) -> float:
    with torch.no_grad():
        expected = model(*[x.clone() for x in inputs])
        kept = [x.clone() for x in inputs]
        got = model_new(*inputs)
    assert all(torch.equal(a, b) for a, b in zip(inputs, kept, strict=True)), "inputs changed"
    assert type(got) is torch.Tensor and got.shape == expected.shape and got.dtype == expected.dtype
    assert got.is_contiguous()
    assert expected.std() > 0, "degenerate reference output at this size"
    err = (got - expected).abs().max().item()
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4), f"max abs error {err}"
    return err


def check_against_reference(
    task_source: str, candidates: list[str], directory: Path, overrides: dict[str, Any], w_max: int = 0
) -> float:
    """Every candidate against Model on three input sets, then with changed weights; the worst error.

    `w_max` > 0 caps the tile width (the module constant) of every candidate but the first, forcing several
    column blocks; the first runs as generated.
    """
    ref_mod = load_task_module(task_source, "reference", overrides)
    init = list(ref_mod.get_init_inputs())
    torch.manual_seed(1)
    own = list(ref_mod.get_inputs())
    worst = 0.0
    for i, candidate_source in enumerate(candidates):
        torch.manual_seed(0)
        model = ref_mod.Model(*init)  # fresh per candidate: the weights are changed in place below
        cand = import_candidate(candidate_source, directory)
        if w_max and i > 0:
            for name in [n for n in vars(cand) if n.startswith("BLOCK_W_MAX_")]:
                setattr(cand, name, w_max)
        torch.manual_seed(0)
        model_new = cand.ModelNew(*init)
        ref_state, new_state = model.state_dict(), model_new.state_dict()
        assert list(ref_state) == list(new_state)
        assert all(torch.equal(ref_state[k], new_state[k]) for k in ref_state)
        for inputs in (own, [x * 6 - 3 for x in own], [x * 6 - 3 + 10 for x in own]):
            worst = max(worst, _compare(model, model_new, inputs))
        # parameters changed in place after construction: the kernel must see the new values
        with torch.no_grad():
            for (_, p), (_, q) in zip(model.named_parameters(), model_new.named_parameters(), strict=True):
                p.mul_(-1.5).add_(0.25)
                q.mul_(-1.5).add_(0.25)
        worst = max(worst, _compare(model, model_new, own))
    return worst


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


def emit(task: Task, config: KernelConfig | None = None) -> str:
    recipe = default_recipes()[KEY]
    return recipe.emit(task_view(task), config or recipe.default_config)  # type: ignore[arg-type]


def _run(task: Task, overrides: dict[str, Any], tmp_path: Path) -> None:
    assert KEY in RulesGenerator().recipes_for(task)
    source = emit(task)
    header = parse_header(source)
    assert header is not None and header.recipe == KEY
    report = static_analyse(source, PrecisionPolicy.FP32_STRICT, require_kernel=True)
    assert report.syntax_error is None and report.has_triton_kernel and report.violations == []
    small = emit(task, KernelConfig(block=16, num_warps=1))  # tiny tiles: several row blocks, masked tails
    worst = isolated(
        "check_against_reference",
        task_source=task.source,
        candidates=[source, small],
        directory=tmp_path,
        overrides=overrides,
        w_max=4,  # and several column blocks
    )
    assert worst <= 1e-4


@pytest.mark.parametrize(("rel", "overrides"), KB_CASES, ids=[c[0].split("/")[1][:2] for c in KB_CASES])
def test_dev_task_kernel_matches_reference(rel: str, overrides: dict[str, Any], tmp_path: Path) -> None:
    task = make_task((KB / rel).read_text(encoding="utf-8"), f"kernelbench/{rel[:-3]}")
    _run(task, overrides, tmp_path)


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_synthetic_forward_kernel_matches_reference(name: str, tmp_path: Path) -> None:
    _run(make_task(SYNTHETIC[name], f"synthetic/{name}"), {}, tmp_path)
