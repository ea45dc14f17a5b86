"""Composed kernels (fusion.composed_kernels) under TRITON_INTERPRET=1 on the CPU, against the reference Model.

Each case is a small task of this file's own (not from any benchmark) combining supported ops in a way no
special recipe was written for: elementwise ops before / after a library op (linear, conv, conv-transpose,
matmul, pooling) around one reduction or normalisation. It is generated through the real rules generator
(`RulesGenerator.generate` with the composed strategy, after `applies` said it does), then run at two input
shapes in a fresh child process (tl.sum / tl.max need TRITON_INTERPRET=1 set before triton's first import):
the reference and ModelNew share their parameters, which are first randomised (default norm weights, ones and
zeros, would hide a wrong broadcast). allclose(rtol=1e-4, atol=1e-4).
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

# name -> (task source with {placeholders} for the sizes, two size sets)
CASES: dict[str, tuple[str, list[dict[str, int]]]] = {
    "linear_gelu_rmsnorm": (
        """class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.norm = nn.RMSNorm(n_out, eps=1e-6)

    def forward(self, x):
        x = self.fc(x * 0.5)
        return self.norm(F.gelu(x)) + 1.0


def get_inputs():
    return [torch.randn({b}, {k})]


def get_init_inputs():
    return [{k}, {n}]
""",
        [{"b": 7, "k": 24, "n": 40}, {"b": 3, "k": 9, "n": 129}],
    ),
    "conv_scale_sigmoid_groupnorm": (
        """class Model(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3)
        self.scale = nn.Parameter(torch.randn(cout, 1, 1))
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        x = torch.sigmoid(self.conv(x) * self.scale)
        return self.gn(x)


def get_inputs():
    return [torch.randn({b}, 3, {h}, {w})]


def get_init_inputs():
    return [3, {c}, {g}]
""",
        [{"b": 2, "h": 9, "w": 10, "c": 8, "g": 4}, {"b": 3, "h": 6, "w": 13, "c": 6, "g": 3}],
    ),
    "affine_logsumexp": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.logsumexp(x * 2 + 1, dim=1)


def get_inputs():
    return [torch.randn({b}, {r}, {i})]


def get_init_inputs():
    return []
""",
        [{"b": 5, "r": 37, "i": 6}, {"b": 2, "r": 300, "i": 1}],
    ),
    "frobenius_division": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.norm(x, p="fro")


def get_inputs():
    return [torch.randn({b}, {c}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 3, "c": 5, "n": 33}, {"b": 2, "c": 7, "n": 129}],
    ),
    "instance_norm_relu": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.InstanceNorm2d(c, affine=True)

    def forward(self, x):
        return torch.relu(self.norm(x))


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w}) * 3 + 5]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 2, "c": 4, "h": 7, "w": 9}, {"b": 3, "c": 3, "h": 11, "w": 5}],
    ),
    "matmul_mean_rows": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b).mean(dim=0) + 0.5


def get_inputs():
    return [torch.randn({m}, {k}), torch.randn({k}, {n})]


def get_init_inputs():
    return []
""",
        [{"m": 13, "k": 8, "n": 11}, {"m": 70, "k": 5, "n": 33}],
    ),
    "avgpool_softmax": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(2)

    def forward(self, x):
        return torch.softmax(self.pool(x), dim=1)


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w})]


def get_init_inputs():
    return []
""",
        [{"b": 2, "c": 6, "h": 8, "w": 10}, {"b": 1, "c": 17, "h": 6, "w": 5}],
    ),
    "batch_norm_tanh": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.tanh(self.bn(x * 2.0))


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w}) + 4]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 3, "c": 5, "h": 6, "w": 7}, {"b": 2, "c": 3, "h": 9, "w": 4}],
    ),
    "layer_norm_gelu": (
        """class Model(nn.Module):
    def __init__(self, h, w):
        super().__init__()
        self.ln = nn.LayerNorm((h, w))

    def forward(self, x):
        return F.gelu(self.ln(x)) * 2


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w}) * 2 + 10]


def get_init_inputs():
    return [{h}, {w}]
""",
        [{"b": 3, "c": 4, "h": 5, "w": 6}, {"b": 2, "c": 1, "h": 17, "w": 9}],
    ),
    "l2_normalise_rows": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / (x.norm(p=2, dim=1, keepdim=True) + 1e-6)


def get_inputs():
    return [torch.randn({b}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 6, "n": 50}, {"b": 3, "n": 1000}],
    ),
    "standardise_with_var": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c, 1))

    def forward(self, x):
        v = torch.var(x, dim=2, keepdim=True)
        return (x - x.mean(dim=2, keepdim=True)) / torch.sqrt(v + 1e-5) + self.bias


def get_inputs():
    return [torch.randn({b}, {c}, {n}) + 10]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 3, "c": 4, "n": 21}, {"b": 2, "c": 3, "n": 140}],
    ),
    "relu_amax_bias_over_channels": (
        """class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return (torch.amax(torch.relu(x), dim=1) + self.bias) * 3


def get_inputs():
    return [torch.randn({b}, {c}, {n})]


def get_init_inputs():
    return [{n}]
""",
        [{"b": 4, "c": 9, "n": 7}, {"b": 2, "c": 30, "n": 65}],
    ),
    "conv_transpose_log_softmax_clamp": (
        """class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.ConvTranspose2d(cin, cout, 3, stride=2)

    def forward(self, x):
        return torch.log_softmax(self.conv(x) - 0.5, dim=1).clamp(min=-3.0)


def get_inputs():
    return [torch.randn({b}, 3, {h}, {w})]


def get_init_inputs():
    return [3, {c}]
""",
        [{"b": 2, "h": 5, "w": 4, "c": 6}, {"b": 1, "h": 3, "w": 7, "c": 5}],
    ),
    "std_times_sigmoid_sums": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.std() * torch.sigmoid(x).sum(dim=(0, 2)).sum()


def get_inputs():
    return [torch.randn({b}, {c}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 4, "c": 9, "n": 7}, {"b": 3, "c": 2, "n": 50}],
    ),
    "sigmoid_f_normalize_channels_shift": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(1, c, 1))

    def forward(self, x):
        return F.normalize(torch.sigmoid(x) - 0.5, p=2.0, dim=1) + self.shift


def get_inputs():
    return [torch.randn({b}, {c}, {n})]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 3, "c": 7, "n": 11}, {"b": 2, "c": 33, "n": 5}],
    ),
    "vector_norm_l1_rows_scaled": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = torch.linalg.vector_norm(x, 1, dim=-1, keepdim=True)
        return torch.tanh(x) * 3.0 / torch.maximum(n, torch.tensor(0.25))


def get_inputs():
    return [torch.randn({b}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 5, "n": 40}, {"b": 2, "n": 300}],
    ),
    "linear_adaptive_avg_pool_sum": (
        """class Model(nn.Module):
    def __init__(self, k, n, out):
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.pool = nn.AdaptiveAvgPool1d(out)

    def forward(self, x):
        y = self.pool(F.elu(self.fc(x)).unsqueeze(1))
        return y.sum(dim=-1) * 0.5


def get_inputs():
    return [torch.randn({b}, {k})]


def get_init_inputs():
    return [{k}, {n}, {out}]
""",
        [{"b": 4, "k": 12, "n": 24, "out": 6}, {"b": 3, "k": 7, "n": 30, "out": 10}],
    ),
    "log1p_logsigmoid_row_mean": (
        """class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.logsigmoid(torch.log1p(x.abs() * 1e-3) * 3e4 - 40.0).mean(dim=1)


def get_inputs():
    return [torch.randn({b}, {n})]


def get_init_inputs():
    return []
""",
        [{"b": 4, "n": 70}, {"b": 3, "n": 129}],
    ),
    "flatten_transpose_layer_norm": (
        """class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.act = nn.LogSigmoid()

    def forward(self, x):
        y = torch.transpose(self.act(x).flatten(2), 1, 2)
        return self.norm(y) + 1.0


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w})]


def get_init_inputs():
    return [{c}]
""",
        [{"b": 2, "c": 6, "h": 3, "w": 5}, {"b": 3, "c": 10, "h": 4, "w": 2}],
    ),
    "addmm_relu_sum_flattened": (
        """class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n))
        self.b = nn.Parameter(torch.randn(n))
        self.flat = nn.Flatten()

    def forward(self, x):
        y = torch.relu(torch.addmm(self.b, self.flat(x), self.w))
        return y.sum(dim=1) * 0.1


def get_inputs():
    return [torch.randn({b}, 2, {h})]


def get_init_inputs():
    return [2 * {h}, {n}]
""",
        [{"b": 5, "h": 6, "n": 9}, {"b": 3, "h": 11, "n": 20}],
    ),
    "adaptive_max_pool2d_softplus_channel_mean": (
        """class Model(nn.Module):
    def __init__(self, oh, ow):
        super().__init__()
        self.oh, self.ow = oh, ow

    def forward(self, x):
        y = F.softplus(F.adaptive_max_pool2d(x * 1.5, (self.oh, self.ow)))
        return y.mean(dim=1)


def get_inputs():
    return [torch.randn({b}, {c}, {h}, {w})]


def get_init_inputs():
    return [{oh}, {ow}]
""",
        [
            {"b": 2, "c": 5, "h": 8, "w": 9, "oh": 4, "ow": 3},
            {"b": 3, "c": 3, "h": 10, "w": 7, "oh": 4, "ow": 3},
        ],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_composed_kernel_matches_reference_at_two_shapes(name: str, tmp_path: Path) -> None:
    template, sizes = CASES[name]
    sources = [HEADER + template.format(**size) for size in sizes]
    candidates = [generate(make_task(name, source)) for source in sources]
    errors = run_checks(sources, candidates, tmp_path)
    assert len(errors) == 2 and all(e <= 1e-4 for e in errors), errors


def test_an_adaptive_pool_candidate_is_correct_at_sizes_it_was_not_written_for(tmp_path: Path) -> None:
    """Adaptive windows depend on the input's size: the candidate written at the first input size (8 x 9 rows
    into 4 x 3, windows of 2 x 3) keeps the pool as the PyTorch call, so it also matches at the second (10 x 7
    into 4 x 3: uneven, overlapping windows), the model built alike."""
    template, sizes = CASES["adaptive_max_pool2d_softplus_channel_mean"]
    sources = [HEADER + template.format(**size) for size in sizes]
    candidate = generate(make_task("adaptive", sources[0]))
    assert "adaptive_max_pool2d(" in candidate
    errors = run_checks(sources, [candidate, candidate], tmp_path)
    assert len(errors) == 2 and all(e <= 1e-4 for e in errors), errors
