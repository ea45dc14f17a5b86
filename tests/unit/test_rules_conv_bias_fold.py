"""fusion.library_epilogue moves a conv module's bias into the fused epilogue (rules/recipes/elementwise/library_epilogue.py).

cuDNN adds a conv bias in its own pass over the output; the epilogue reads every output element anyway, so the
generated forward calls the conv without its bias and the kernel adds it first, exactly once. Convs without a
bias, functional convs and matmuls keep their call as written.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from htam_graph.model import Task
from htam_graph.rules import KernelConfig
from htam_graph.rules.generator import task_view
from htam_graph.rules.recipes.elementwise.library_epilogue import LibraryEpilogue

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


def _emit(source: str) -> str:
    task = Task(
        key="user/conv_bias",
        suite="user",
        level=None,
        name="conv_bias",
        source=source,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
    )
    return LibraryEpilogue().emit(task_view(task), KernelConfig(block=256, num_warps=4))


def _forward(source: str) -> str:
    return source[source.index("    def forward") :]


def _task_source(conv: str, call: str = "self.conv(x)") -> str:
    return f"""import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {conv}

    def forward(self, x):
        x = {call}
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.rand(2, 3, 6, 7)]

def get_init_inputs():
    return []
"""


def test_conv3d_bias_moves_into_the_epilogue() -> None:
    src = _emit((KB / "level2/48_Conv3d_Scaling_Tanh_Multiply_Sigmoid.py").read_text(encoding="utf-8"))
    forward = _forward(src)
    assert "self.conv._conv_forward(x, self.conv.weight, None)" in forward
    assert "self.conv(x)" not in forward
    assert "self.conv.bias.view(-1, 1, 1, 1)" in forward
    # the kernel adds the per-channel bias to the conv result before the task's own first op (the mul)
    adds = re.findall(r"v_conv = conv_nobias \+ conv_bias_per_channel", src)
    assert len(adds) == 1
    assert src.index("v_conv = conv_nobias + conv_bias_per_channel") < src.index("v_mul = v_conv *")


def test_conv_transpose_bias_moves_into_the_epilogue() -> None:
    src = _emit((KB / "level2/100_ConvTranspose3d_Clamp_Min_Divide.py").read_text(encoding="utf-8"))
    forward = _forward(src)
    call = (
        "torch.nn.functional.conv_transpose3d(x, self.conv_transpose.weight, None, self.conv_transpose.stride, "
        "self.conv_transpose.padding, self.conv_transpose.output_padding, self.conv_transpose.groups, "
        "self.conv_transpose.dilation)"
    )
    assert call in forward
    assert "self.conv_transpose.bias.view(-1, 1, 1, 1)" in forward


@pytest.mark.parametrize(
    ("conv", "call", "kept"),
    [
        ("nn.Conv2d(3, 4, 3, bias=False)", "self.conv(x)", "y = self.conv(x)"),
        ("nn.Linear(7, 5)", "self.conv(x)", "y = self.conv(x)"),
    ],
    ids=["conv_without_bias", "linear"],
)
def test_calls_without_a_conv_bias_stay_as_written(conv: str, call: str, kept: str) -> None:
    forward = _forward(_emit(_task_source(conv, call)))
    assert kept in forward
    assert "bias_per_channel" not in forward


def test_padding_mode_survives_through_the_modules_own_conv_forward() -> None:
    src = _emit(_task_source("nn.Conv2d(3, 4, 3, padding=1, padding_mode='circular')"))
    assert "self.conv._conv_forward(x, self.conv.weight, None)" in _forward(src)
    assert "self.conv.bias.view(-1, 1, 1)" in _forward(src)
