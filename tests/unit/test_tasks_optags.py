"""Static op tags: a table of expected tags on real KernelBench tasks, and the rules on small snippets."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.importers.optags import VOCABULARY, op_tags

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"
FILES = sorted(KB.glob("level*/*.py"))

EXPECTED = {
    "level1/20_LeakyReLU.py": ["activation", "elementwise"],
    "level1/24_LogSoftmax.py": ["softmax"],
    "level1/40_LayerNorm.py": ["norm"],
    "level1/36_RMSNorm_.py": ["elementwise", "norm", "reduction"],
    "level1/2_Standard_matrix_multiplication_.py": ["matmul"],
    "level1/14_Matmul_for_upper_triangular_matrices.py": ["indexing", "matmul"],
    "level1/50_conv_standard_2D__square_input__square_kernel.py": ["conv"],
    "level1/64_conv_transposed_1D.py": ["conv_transpose"],
    "level1/42_Max_Pooling_2D.py": ["pooling"],
    "level1/90_cumprod.py": ["reduction", "scan"],
    "level1/94_MSELoss.py": ["elementwise", "loss", "reduction"],
    "level1/96_HuberLoss.py": ["loss"],
    "level1/30_Softsign.py": ["activation", "elementwise"],
    "level2/76_Gemm_Add_ReLU.py": ["activation", "broadcast", "elementwise", "matmul"],
    "level2/24_Conv3d_Min_Softmax.py": ["conv", "reduction", "softmax"],
    "level3/36_LSTMHn.py": ["indexing", "matmul", "rnn"],
    "level3/44_MiniGPTBlock.py": [
        "activation",
        "attention",
        "elementwise",
        "indexing",
        "matmul",
        "norm",
        "softmax",
    ],
    "level3/50_ReLUSelfAttention.py": ["activation", "attention", "elementwise", "indexing", "matmul"],
}


@pytest.mark.skipif(not FILES, reason="no KernelBench dev split")
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_expected_tags_of_representative_tasks(rel: str) -> None:
    assert op_tags((KB / rel).read_text(encoding="utf-8")) == EXPECTED[rel]


@pytest.mark.skipif(not FILES, reason="no KernelBench dev split")
def test_every_dev_task_gets_sorted_tags_from_the_vocabulary() -> None:
    for path in FILES:
        tags = op_tags(path.read_text(encoding="utf-8"))
        assert tags, path
        assert tags == sorted(set(tags)), path
        assert set(tags) <= set(VOCABULARY), path
    conv_like = [p for p in FILES if "conv" in p.name.lower() and "transpose" not in p.name.lower()]
    assert all("conv" in op_tags(p.read_text(encoding="utf-8")) for p in conv_like)


def _task(init: str, forward: str, args: str = "x") -> str:
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
        "class Model(nn.Module):\n    def __init__(self, n=4):\n        super().__init__()\n"
        + "".join(f"        {line}\n" for line in (init.splitlines() or ["pass"]))
        + f"\n    def forward(self, {args}):\n"
        + "".join(f"        {line}\n" for line in forward.splitlines())
        + "\ndef get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n"
    )


@pytest.mark.parametrize(
    ("init", "forward", "args", "expected"),
    [
        ("", "return x @ x", "x", ["matmul"]),
        ("", "return torch.bmm(x, x)", "x", ["matmul"]),
        ("self.fc = nn.Linear(n, n)", "return self.fc(x)", "x", ["matmul"]),
        ("", "return F.linear(x, x)", "x", ["matmul"]),
        ("self.c = nn.ConvTranspose2d(n, n, 3)", "return self.c(x)", "x", ["conv_transpose"]),
        ("", "return torch.clamp(x, min=0.0)", "x", ["elementwise"]),
        ("", "return x * 2.0", "x", ["elementwise"]),
        ("", "return x.max(dim=1).values", "x", ["reduction"]),
        ("", "return torch.max(x, y)", "x, y", ["elementwise"]),
        ("", "n = max(1, x.size(0))\nreturn x.sum()", "x", ["reduction"]),  # builtin max is not an op
        ("", "return torch.cumsum(x, dim=1)", "x", ["reduction", "scan"]),
        ("self.n = nn.GroupNorm(2, n)", "return self.n(x)", "x", ["norm"]),
        ("", "return F.adaptive_avg_pool2d(x, 1)", "x", ["pooling"]),
        ("self.l = nn.CrossEntropyLoss()", "return self.l(x, y)", "x, y", ["loss"]),
        ("", "return F.scaled_dot_product_attention(q, k, v)", "q, k, v", ["attention"]),
        (
            "self.a = nn.MultiheadAttention(n, 2)",
            "return self.a(x, x, x)[0]",
            "x",
            ["attention", "matmul", "softmax"],
        ),
        ("self.r = nn.GRU(n, n)", "return self.r(x)", "x", ["rnn"]),
        ("", "return torch.gather(x, 1, i)", "x, i", ["indexing"]),
        ("", "return x[:, 0]", "x", ["indexing"]),
        ("self.b = nn.Parameter(torch.randn(n))", "return x + self.b", "x", ["broadcast", "elementwise"]),
        ("", "return x.shape[0] * 2", "x", []),  # arithmetic on sizes is not an op
        ("", "return x / torch.norm(x, p=2, dim=1, keepdim=True)", "x", ["elementwise", "norm"]),
        (
            "",
            "e = torch.exp(x)\nreturn e / e.sum(dim=1, keepdim=True)",
            "x",
            ["elementwise", "reduction", "softmax"],
        ),
    ],
)
def test_rules_on_snippets(init: str, forward: str, args: str, expected: list[str]) -> None:
    assert op_tags(_task(init, forward, args)) == expected


def test_init_only_calls_do_not_count_and_helpers_are_followed() -> None:
    source = _task(
        "self.register_buffer('m', torch.tril(torch.ones(n, n)))\nself.blk = Block(n)", "return self.blk(x)"
    )
    source += "\nclass Block(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.c = nn.Conv2d(n, n, 3)\n    def forward(self, x):\n        return torch.sigmoid(self.c(x))\n"
    assert op_tags(source) == ["activation", "conv", "elementwise"]


def test_source_without_model_or_unparsable_has_no_tags() -> None:
    assert op_tags("def f(:\n") == []
    assert op_tags("import torch\nx = torch.relu(torch.ones(1))\n") == []
