"""Loading a task source into a fresh module with its size constants overridden."""

from __future__ import annotations

import ast

import pytest
import torch

from htam_graph.errors import TaskError
from htam_graph.kernels_runtime.worker.taskmod import literal_sizes, load_task_module

SOURCE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.zeros(bias_shape))

    def forward(self, x):
        return self.fc(x) + self.bias

batch_size = 1024
in_features = 64 * 2
out_features = 8192
bias_shape = (out_features,)
depth, height, width = (16, 32, 32)
a = b = 40
sizes = [300, 400]
shape = (7, 9)
negative_slope = 0.01

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, bias_shape]
"""


def test_without_overrides_the_module_keeps_its_constants() -> None:
    module = load_task_module(SOURCE, "t/plain")
    assert (module.batch_size, module.in_features, module.bias_shape) == (1024, 128, (8192,))


def test_derived_constants_follow_the_overrides() -> None:
    module = load_task_module(SOURCE, "t/small", {"batch_size": 3, "in_features": 5, "out_features": 7})
    assert module.bias_shape == (7,)
    model = module.Model(*module.get_init_inputs())
    (x,) = module.get_inputs()
    assert x.shape == (3, 5)
    assert model(x).shape == (3, 7)


def test_tuple_unpacking_chained_and_sequence_constants_can_be_overridden() -> None:
    module = load_task_module(SOURCE, "t/forms", {"height": 5, "a": 2, "sizes": (3, 4), "shape": (1, 2)})
    assert (module.depth, module.height, module.width) == (16, 5, 32)
    assert (module.a, module.b) == (2, 40)
    assert module.sizes == [3, 4]  # a list stays a list
    assert module.shape == (1, 2)


@pytest.mark.parametrize(
    "overrides",
    [
        {"nope": 3},
        {"negative_slope": 1},
        {"batch_size": (1, 2)},
        {"sizes": 3},
        {"sizes": (1, 2, 3)},
        {"batch_size": True},
    ],
)
def test_bad_overrides_raise(overrides: dict[str, object]) -> None:
    with pytest.raises(TaskError, match="override"):
        load_task_module(SOURCE, "t/bad", overrides)  # type: ignore[arg-type]


def test_each_load_is_a_fresh_namespace() -> None:
    one = load_task_module(SOURCE, "t/one", {"batch_size": 2})
    two = load_task_module(SOURCE, "t/two")
    one.extra = 1
    assert two.batch_size == 1024 and not hasattr(two, "extra")
    assert one.Model is not two.Model


def test_syntax_and_module_errors_are_task_errors() -> None:
    with pytest.raises(TaskError, match="syntax error at line 1"):
        load_task_module("def f(:\n", "t/syntax")
    with pytest.raises(TaskError, match="ZeroDivisionError"):
        load_task_module("x = 1 // 0\n", "t/raise")


def test_tracebacks_show_the_task_lines() -> None:
    module = load_task_module("def boom():\n    raise ValueError('from the task')\n", "t/tb")
    import traceback

    try:
        module.boom()
    except ValueError:
        text = traceback.format_exc()
    assert "raise ValueError('from the task')" in text
    assert torch.is_tensor(torch.zeros(1))


LITERALS = """import torch

n = 4

def get_inputs():
    return [torch.randn(n, 3, 224, 224), torch.zeros((7, 64)), torch.randint(0, 10, (100,)), torch.full((9,), 2.0)]
"""


def test_literal_sizes_of_get_inputs_are_numbered_and_can_be_overridden() -> None:
    assert literal_sizes(ast.parse(LITERALS)) == {
        "get_inputs#1": 3,
        "get_inputs#2": 224,
        "get_inputs#3": 224,
        "get_inputs#4": 7,
        "get_inputs#5": 64,
        "get_inputs#6": 100,  # randint's bounds 0, 10 and full's fill value are not sizes
        "get_inputs#7": 9,
    }
    # the numbering survives ast.unparse (the smoke search of a declared configuration runs on unparsed source)
    assert literal_sizes(ast.parse(ast.unparse(ast.parse(LITERALS)))) == literal_sizes(ast.parse(LITERALS))
    module = load_task_module(
        LITERALS, "t/lit", {"get_inputs#2": 16, "get_inputs#3": 8, "get_inputs#6": 5, "n": 2}
    )
    shapes = [tuple(t.shape) for t in module.get_inputs()]
    assert shapes == [(2, 3, 16, 8), (7, 64), (5,), (9,)]
    with pytest.raises(TaskError, match="no literal size"):
        load_task_module(LITERALS, "t/lit", {"get_inputs#8": 2})
    with pytest.raises(TaskError, match="positive integer"):
        load_task_module(LITERALS, "t/lit", {"get_inputs#1": 0})
