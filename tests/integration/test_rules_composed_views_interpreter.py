"""Composed kernels around size reads, views and calls kept as written (rules/analysis/reshapes.py, calls.py),
under TRITON_INTERPRET=1 on the CPU, against the reference Model.

Each case is a small task of this file's own: a view / reshape whose shape is computed from `x.shape`
(unpacked or indexed) and model attributes, a permute, slicing with a size read as its bound, torch.cat,
chunk and split, a size used as a number in the arithmetic, an operand broadcast over dims between its own
(`x[:, None]` against a [B, C, F] result, and in three blocks), an in-place op on the result
(`out.mul_(s)`), a value read by two groups, row sums of one shape dividing a result of another, pools whose
window is the input's plane, powers with fractional, large or run-time exponents, and ops the rules do not
know (einsum, roll, flip, pad) kept as the calls the reference made. The candidate is written once, at the
first size set, and run at both: the sizes are read at run time, so it must hold at the second (parameters
randomised and shared; allclose(rtol=1e-4, atol=1e-4)).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

_checks = runpy.run_path(str(Path(__file__).with_name("sibling_module.py")))["load_sibling"](
    "composed_checks"
)
HEADER, make_task, generate, run_checks = (
    _checks.HEADER,
    _checks.make_task,
    _checks.generate,
    _checks.run_checks,
)

# name -> (task source with {placeholders} for the sizes, two size sets, what the forward must keep)
CASES: dict[str, tuple[str, list[dict[str, int]], str]] = {
    "conv_depth_to_space_tanh": (
        """class Model(nn.Module):
    def __init__(self, cin, cout, r):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout * r * r, 3, padding=1)
        self.r = r

    def forward(self, x):
        y = self.conv(x)
        n, c, h, w = y.shape
        y = y.view(n, c // (self.r * self.r), self.r, self.r, h, w).permute(0, 1, 4, 2, 5, 3)
        return torch.tanh(y.reshape(n, -1, h * self.r, w * self.r)) * 2.0


def get_inputs():
    return [torch.randn({b}, 3, {h}, {w})]


def get_init_inputs():
    return [3, 2, 2]
""",
        [{"b": 2, "h": 5, "w": 4}, {"b": 3, "h": 3, "w": 7}],
        ".permute(",
    ),
    "linear_maxout_residual": (
        """class Model(nn.Module):
    def __init__(self, f, k):
        super().__init__()
        self.fc = nn.Linear(f, f * k)
        self.f, self.k = f, k

    def forward(self, x):
        y = self.fc(x).view(x.shape[0], self.f, self.k)
        return x - 0.5 * torch.amax(y, dim=-1)


def get_inputs():
    return [torch.randn({b}, {f})]


def get_init_inputs():
    return [{f}, 3]
""",
        [{"b": 5, "f": 12}, {"b": 9, "f": 12}],
        ".reshape(",
    ),
    "causal_conv_trim_gelu": (
        """class Model(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.conv = nn.Conv1d(c, c, k, padding=k - 1)

    def forward(self, x):
        n = x.size(-1)
        return F.gelu(self.conv(x)[:, :, :n]) + x


def get_inputs():
    return [torch.randn({b}, 4, {n})]


def get_init_inputs():
    return [4, 3]
""",
        [{"b": 2, "n": 11}, {"b": 3, "n": 6}],
        "[:, :, :",
    ),
    "channels_last_layer_norm_residual": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.gain = nn.Parameter(torch.randn(c))

    def forward(self, x):
        y = self.norm(torch.sigmoid(x).permute(0, 2, 3, 1)) * self.gain
        return x + y.permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn({b}, 6, {h}, {w})]


def get_init_inputs():
    return [6]
""",
        [{"b": 2, "h": 3, "w": 5}, {"b": 1, "h": 4, "w": 4}],
        ".permute(",
    ),
    "pairwise_distance_kernel": (
        """class Model(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.centres = nn.Parameter(torch.randn(c, f))

    def forward(self, x):
        d = (x.unsqueeze(1) - self.centres).abs().sum(dim=-1)
        return torch.exp(-0.1 * d)


def get_inputs():
    return [torch.randn({b}, {f})]


def get_init_inputs():
    return [5, {f}]
""",
        [{"b": 7, "f": 9}, {"b": 4, "f": 9}],
        "broadcast_blocks(",
    ),
    "three_block_broadcast_row_sum": (
        """class Model(nn.Module):
    def __init__(self, c, d):
        super().__init__()
        self.w = nn.Parameter(torch.randn(c, 1, d, 1))

    def forward(self, x):
        y = x[:, None, :, None, :] * self.w
        return torch.tanh(y).sum(dim=-1)


def get_inputs():
    return [torch.randn({b}, {f}, 5)]


def get_init_inputs():
    return [3, 4]
""",
        [{"b": 2, "f": 6}, {"b": 3, "f": 4}],
        ".expand(",
    ),
    "gram_mean_over_size": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        b, c, h, w = x.shape
        f = x.reshape(b, c, h * w)
        g = torch.bmm(f, f.transpose(1, 2))
        return torch.relu(g / (h * w) - 0.1)


def get_inputs():
    return [torch.randn({b}, 3, {h}, {w})]


def get_init_inputs():
    return []
""",
        [{"b": 2, "h": 4, "w": 5}, {"b": 3, "h": 6, "w": 2}],
        "float(",
    ),
    "cat_signed_relu_conv": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(2 * c, c, 1)

    def forward(self, x):
        y = torch.cat([torch.relu(x), torch.relu(-x)], dim=1)
        return torch.sigmoid(self.conv(y)) * x


def get_inputs():
    return [torch.randn({b}, 4, {h}, {h})]


def get_init_inputs():
    return [4]
""",
        [{"b": 2, "h": 3}, {"b": 1, "h": 5}],
        "torch.cat(",
    ),
    "gated_halves_of_a_conv": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv1d(c, 2 * c, 3, padding=1)

    def forward(self, x):
        a, b = self.conv(x).chunk(2, dim=1)
        first = torch.split(x, 1, dim=1)[0]
        return torch.tanh(a) * torch.sigmoid(b) + first


def get_inputs():
    return [torch.randn({b}, 3, {n})]


def get_init_inputs():
    return [3]
""",
        [{"b": 2, "n": 8}, {"b": 3, "n": 5}],
        "torch.chunk(",
    ),
    "in_place_scale_of_a_normalised_output": (
        """class Model(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.fc = nn.Linear(f, f)
        self.scale = 1.5

    def forward(self, x):
        y = torch.tanh(self.fc(x))
        out = y / torch.norm(y, dim=-1, keepdim=True)
        out.mul_(self.scale)
        return out


def get_inputs():
    return [torch.randn({b}, {f})]


def get_init_inputs():
    return [{f}]
""",
        [{"b": 3, "f": 10}, {"b": 6, "f": 10}],
        "truediv -> mul",
    ),
    "linear_read_twice_then_cat_layer_norm": (
        """class Model(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.fc = nn.Linear(f, f)
        self.norm = nn.LayerNorm(2 * f)

    def forward(self, x):
        y = self.fc(x)
        return self.norm(torch.cat([F.relu(y), F.relu(-y)], dim=-1))


def get_inputs():
    return [torch.randn({b}, {f})]


def get_init_inputs():
    return [{f}]
""",
        [{"b": 3, "f": 7}, {"b": 5, "f": 7}],
        "torch.cat(",
    ),
    "ops_kept_as_calls": (
        """class Model(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.proto = nn.Parameter(torch.randn(5, f))
        self.step = 2

    def forward(self, x):
        s = torch.einsum("bf,cf->bc", F.normalize(x, dim=-1), self.proto)
        s = torch.roll(s, self.step, 1).flip([0])
        return F.pad(torch.tanh(s), (1, self.step)) * 3.0


def get_inputs():
    return [torch.randn({b}, {f})]


def get_init_inputs():
    return [{f}]
""",
        [{"b": 4, "f": 6}, {"b": 7, "f": 6}],
        "torch.einsum(",
    ),
    "row_sums_of_another_shape_divide_a_bmm": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, v):
        agg = torch.bmm(a, v)
        deg = a.abs().sum(dim=-1, keepdim=True) + 1.0
        return torch.tanh(agg / deg)


def get_inputs():
    return [torch.randn({b}, {n}, {n}), torch.randn({b}, {n}, 3)]


def get_init_inputs():
    return []
""",
        [{"b": 2, "n": 5}, {"b": 3, "n": 4}],
        "torch.bmm(",
    ),
    "whole_plane_pools_from_the_shape": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = x.clamp(min=1e-3) ** 2.0
        a = torch.sqrt(F.avg_pool2d(y, y.shape[-2:]))
        m = F.max_pool2d(x, (x.size(-2), x.size(-1)))
        return (a + m).flatten(1)


def get_inputs():
    return [torch.randn({b}, 3, {h}, {w})]


def get_init_inputs():
    return []
""",
        [{"b": 2, "h": 5, "w": 6}, {"b": 3, "h": 7, "w": 3}],
        "torch.flatten(",
    ),
    "gem_pool_with_an_attribute_exponent": (
        """class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p, self.eps = p, 1e-3

    def forward(self, x):
        x = x.clamp(min=self.eps).pow(self.p)
        x = F.avg_pool2d(x, (x.size(-2), x.size(-1)))
        return x.pow(1.0 / self.p).flatten(1)


def get_inputs():
    return [torch.randn({b}, 4, {h}, {h})]


def get_init_inputs():
    return [3.0]
""",
        [{"b": 2, "h": 5}, {"b": 3, "h": 3}],
        "float(self.p)",
    ),
    "powers_of_signed_values": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 3.0

    def forward(self, x):
        return (x**self.k) * 0.01 + x.abs() ** 2.5 - (x * 0.5) ** 11 + torch.relu(x) ** 0.75


def get_inputs():
    return [torch.randn({b}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 3, "n": 7}, {"b": 5, "n": 4}],
        "_powf(",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_candidate_with_views_holds_at_another_size(name: str, tmp_path: Path) -> None:
    template, sizes, kept = CASES[name]
    sources = [HEADER + template.format(**size) for size in sizes]
    candidate = generate(make_task(name, sources[0]))
    assert kept in candidate, f"the forward should contain {kept!r}"
    errors = run_checks(sources, [candidate, candidate], tmp_path)
    assert len(errors) == 2 and all(e <= 1e-4 for e in errors), errors


def test_only_recipes_that_keep_calls_accept_an_unknown_op() -> None:
    """`x.sum(dim=1)` gets the dim-reduction recipe; after a `torch.roll` (a CALL node) only the composed and
    3xTF32 recipes, which write every op they do not replace as the reference's call, may apply."""
    from htam_graph.rules.generator import task_view
    from htam_graph.rules.recipes import default_recipes

    body = (
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return {}.sum(dim=1)\n\n\n"
    )
    tail = "def get_inputs():\n    return [torch.randn(4, 64)]\n\n\ndef get_init_inputs():\n    return []\n"
    plain, rolled = (
        make_task(n, HEADER + body.format(e) + tail) for n, e in (("p", "x"), ("r", "torch.roll(x, 1, 1)"))
    )
    recipes = default_recipes()
    assert recipes["reduction_structure.dim_reduction"].check(task_view(plain))
    verdict = recipes["reduction_structure.dim_reduction"].check(task_view(rolled))
    assert not verdict and "kept as a call" in verdict.reason
    assert recipes["fusion.composed_kernels"].check(task_view(rolled))
