"""Shape variants: size heuristics, scaling, validated smoke sizes with back-off, and extra variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.errors import TaskError
from htam_graph.kernels_runtime.worker import shapes
from htam_graph.kernels_runtime.worker.taskmod import load_task_module

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"

CONV = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c_in, c_out, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size)

    def forward(self, x):
        return torch.relu(self.conv(x))

batch_size = 64
in_channels = 16
out_channels = 32
kernel_size = 33
height = width = 512
negative_slope = 0.1
eps = 1
use_bias = True
dim = 1
max_seqlen = 1024
clamp_max = 6

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    shapes.clear_cache()


def test_size_constants_keep_ints_that_look_like_sizes() -> None:
    sizes = shapes.size_constants(CONV)
    assert sizes == {
        "batch_size": 64,
        "in_channels": 16,
        "out_channels": 32,
        "kernel_size": 33,
        "height": 512,
        "width": 512,
        "dim": 1,
        "max_seqlen": 1024,  # "max" with a size word is a size
    }  # floats, bools, eps, clamp_max are not sizes


def test_scaled_variant_keeps_structural_sizes_and_caps_batch() -> None:
    variant = shapes.scaled_variant(CONV, 16)
    assert variant == {
        "batch_size": 2,
        "in_channels": 8,
        "out_channels": 8,
        "height": 32,
        "width": 32,
        "max_seqlen": 64,
    }
    assert shapes.scaled_variant(CONV, 1) == {"batch_size": 2}


def test_smoke_backs_off_until_the_reference_runs() -> None:
    # kernel 33 needs images of at least 33: the aggressive steps fail and the search backs off.
    spec = shapes.smoke_overrides(CONV, name="conv")
    assert spec.validated == "cpu" and spec.forward_s is not None
    assert int(spec.overrides["height"]) >= 33
    module = load_task_module(CONV, "conv", spec.overrides)
    out = module.Model(*module.get_init_inputs())(*module.get_inputs())
    assert out.numel() > 0


def test_smoke_raises_when_no_variant_runs() -> None:
    broken = CONV.replace("return torch.relu(self.conv(x))", "raise RuntimeError('never works')")
    with pytest.raises(TaskError, match="no smoke shape variant runs"):
        shapes.smoke_overrides(broken, name="broken")


ELEMENTWISE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return BODY

batch_size = 4096
dim = 393216

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""


def test_smoke_rejects_nan_outputs() -> None:
    with pytest.raises(TaskError, match="NaN"):
        shapes.smoke_overrides(ELEMENTWISE.replace("BODY", "x * float('nan')"), name="nan")


def test_constant_outputs_are_flagged_and_varying_ones_are_not() -> None:
    const = shapes.smoke_overrides(ELEMENTWISE.replace("BODY", "torch.zeros_like(x)"), name="const")
    assert const.note == "constant output at every tried variant"
    varying = shapes.smoke_overrides(ELEMENTWISE.replace("BODY", "torch.relu(x)"), name="relu")
    assert varying.note == ""
    # the batch is capped and the row shrunk so the input fits the interpreter-sized element budget
    assert varying.overrides["batch_size"] == 2
    assert 2 * int(varying.overrides["dim"]) <= shapes.MAX_ELEMENTS  # type: ignore[call-overload]


def test_smoke_results_are_cached_per_source() -> None:
    first = shapes.smoke_overrides(CONV, name="conv")
    assert shapes.smoke_overrides(CONV, name="conv") is first


def test_extra_variant_differs_is_valid_and_deterministic() -> None:
    base = shapes.smoke_overrides(CONV, name="conv")
    extra = shapes.extra_shape_variant(CONV, base.overrides, seed=1, name="conv")
    assert extra.overrides != base.overrides and extra.validated == "cpu"
    assert extra.overrides["batch_size"] == 3  # batch 2 -> 3, not a power of two
    shapes.clear_cache()
    assert shapes.extra_shape_variant(CONV, base.overrides, seed=1, name="conv").overrides == extra.overrides
    module = load_task_module(CONV, "conv", extra.overrides)
    assert module.Model(*module.get_init_inputs())(*module.get_inputs()).numel() > 0


def test_variant_for() -> None:
    assert shapes.variant_for(CONV, "default").overrides == {}
    smoke = shapes.variant_for(CONV, "smoke", name="conv")
    assert smoke == shapes.smoke_overrides(CONV, name="conv")
    assert shapes.variant_for(CONV, "smoke", extra=2, name="conv").overrides != smoke.overrides
    with pytest.raises(TaskError):
        shapes.variant_for(CONV, "huge")  # type: ignore[arg-type]


def test_default_extra_variant_is_validated_on_the_meta_device() -> None:
    spec = shapes.variant_for(CONV, "default", extra=1, name="conv")
    assert spec.validated == "meta" and spec.overrides and spec.overrides != {}


@pytest.mark.parametrize("rel", ["level2/76_Gemm_Add_ReLU.py", "level3/28_VisionTransformer.py"])
def test_real_tasks_get_small_smoke_variants(rel: str) -> None:
    source = (KB / rel).read_text(encoding="utf-8")
    spec = shapes.smoke_overrides(source, name=rel)
    assert spec.forward_s is not None and spec.forward_s < 2.0
    assert spec.overrides  # something was scaled down


LITERAL_IMAGES = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(12, 4, kernel_size=3)

    def forward(self, x):
        return self.conv(x).mean(dim=(2, 3))

batch_size = 16

def get_inputs():
    return [torch.randn(batch_size, 12, 160, 160)]

def get_init_inputs():
    return []
"""


def test_literal_image_sizes_in_get_inputs_are_shrunk_and_channels_kept() -> None:
    # 12 is also the conv's in_channels literal: tied to the model, so only the two 160s are scalable.
    assert shapes.scalable_literals(LITERAL_IMAGES) == {"get_inputs#2": 160, "get_inputs#3": 160}
    spec = shapes.smoke_overrides(LITERAL_IMAGES, name="literal-images")
    assert spec.validated == "cpu"
    side = spec.overrides["get_inputs#2"]
    assert isinstance(side, int) and side < 160 and spec.overrides["get_inputs#3"] == side
    (x,) = load_task_module(LITERAL_IMAGES, "literal-images", spec.overrides).get_inputs()
    assert tuple(x.shape) == (2, 12, side, side)
    assert x.numel() <= shapes.MAX_ELEMENTS


LITERAL_FLATTEN = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc = nn.Linear(4096, hidden)

    def forward(self, x):
        return self.fc(x.flatten(1))

batch_size = 8
hidden = 8192

def get_inputs():
    return [torch.randn(batch_size, 4, 32, 32)]

def get_init_inputs():
    return [hidden]
"""


def test_literals_that_cannot_shrink_leave_the_named_sizes_to_the_plain_search() -> None:
    # 4 * 32 * 32 must stay 4096 (the Linear's literal width): every step that shrinks the 32s fails, and the
    # search without the literals still scales the Linear's `hidden` down.
    assert shapes.scalable_literals(LITERAL_FLATTEN) == {"get_inputs#2": 32, "get_inputs#3": 32}
    spec = shapes.smoke_overrides(LITERAL_FLATTEN, name="literal-flatten")
    assert not any(k.startswith("get_inputs#") for k in spec.overrides)
    assert spec.overrides["batch_size"] == 2
    hidden = spec.overrides["hidden"]
    assert isinstance(hidden, int) and 4096 * hidden <= shapes.MAX_PARAMS
    module = load_task_module(LITERAL_FLATTEN, "literal-flatten", spec.overrides)
    assert tuple(module.Model(*module.get_init_inputs())(*module.get_inputs()).shape) == (2, hidden)


UPSAMPLING = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.nn.functional.interpolate(x, scale_factor=4)
        return torch.sigmoid(y).mean(dim=(2, 3))

batch_size = 16
channels = 4
height = width = 64

def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]

def get_init_inputs():
    return []
"""


def test_a_large_intermediate_scales_the_smoke_variant_harder() -> None:
    """The input fits the element cap, but the forward upsamples it 16-fold: the search keeps scaling until the
    largest tensor of the forward fits too (an interpreted kernel over that tensor pays for each element)."""
    from htam_graph.kernels_runtime.worker.refprobe import probe_cpu

    spec = shapes.smoke_overrides(UPSAMPLING, name="upsampling")
    probe = probe_cpu(UPSAMPLING, "upsampling", spec.overrides)
    assert probe.ok and probe.input_numel <= shapes.MAX_ELEMENTS
    assert probe.largest_intermediate <= shapes.MAX_INTERMEDIATE
    without_cap = shapes.MAX_INTERMEDIATE
    try:
        shapes.MAX_INTERMEDIATE = 1 << 40
        shapes.clear_cache()
        loose = probe_cpu(
            UPSAMPLING, "upsampling", shapes.smoke_overrides(UPSAMPLING, name="upsampling").overrides
        )
    finally:
        shapes.MAX_INTERMEDIATE = without_cap
        shapes.clear_cache()  # the search made under the raised cap is not the task's smoke shape
    assert loose.largest_intermediate > shapes.MAX_INTERMEDIATE  # the cap is what shrank it
