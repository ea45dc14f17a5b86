"""A conv whose bias fusion.library_epilogue moved into the epilogue still matches Model, including a padding
mode other than zeros (the generated forward calls the module's own `_conv_forward` without the bias) and a
changed bias after construction (the kernel reads the parameter, not a copy). Runs under TRITON_INTERPRET=1."""

from __future__ import annotations

import runpy
from pathlib import Path

import torch

from htam_graph.kernels_runtime.worker.taskmod import load_task_module
from tests.unit.test_rules_conv_bias_fold import _emit, _task_source  # shared source builders

HELPERS = runpy.run_path(str(Path(__file__).with_name("test_rules_interpreter.py")))


def test_circular_padding_conv_with_bias_matches_reference(tmp_path: Path) -> None:
    source = _task_source("nn.Conv2d(3, 4, 3, padding=1, padding_mode='circular')")
    candidate = _emit(source)
    err = HELPERS["check_against_reference"](source, candidate, tmp_path, {})
    assert err < 1e-4


def test_a_changed_bias_changes_the_output(tmp_path: Path) -> None:
    source = _task_source("nn.Conv2d(3, 4, 3)")
    cand = HELPERS["import_candidate"](_emit(source), tmp_path)
    ref_mod = load_task_module(source, "reference", {})
    torch.manual_seed(0)
    model, new = ref_mod.Model(), cand.ModelNew()
    new.load_state_dict(model.state_dict())
    x = torch.rand(2, 3, 6, 7)
    with torch.no_grad():
        model.conv.bias.add_(0.5)
        new.conv.bias.add_(0.5)
        assert torch.allclose(new(x), model(x), rtol=1e-4, atol=1e-4)
