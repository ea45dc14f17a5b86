"""The shared scaffolding of the rules GPU tests (tests/gpu/rules_gpu_support.py) run on the CPU, so that it
cannot rot between GPU runs.

End to end (TRITON_INTERPRET=1, smoke sizes): for an elementwise chain, a norm with weights and an argmin
(exact index comparison), `run_case(device="cpu")` must pass the generated kernel and must fail deliberately
wrong candidates built on it: output + 1e-2, wrong only on negative inputs (caught only by the transformed
copy), perturbed weights (caught by the state-dict check), one index off by one (caught by the exact check).
The kernels use tl.reduce, so those checks run in a fresh child process with TRITON_INTERPRET=1 set before
triton is imported. In process (no Triton): `compare_outputs`, `fp32_strict`, the CPU timer and
`import_candidate` (the runtime's `load_candidate`: a candidate that does not load fails the test with the
runtime's classification and message).
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

SUPPORT_PATH = Path(__file__).resolve().parents[1] / "gpu" / "rules_gpu_support.py"
SUPPORT_NAME = "tests.gpu.rules_gpu_support"
INTERP_CHILD = Path(__file__).with_name("interp_child.py")  # the shared child-process runner
KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"

# Appended to a generated source: a ModelNew that is wrong in one known way (the correct one is its base).
_BASE = "\n\n_CorrectModelNew = ModelNew\n\n\nclass ModelNew(_CorrectModelNew):\n"
WRONG: dict[str, str] = {
    "plus_1e-2": _BASE + "    def forward(self, *args):\n        return super().forward(*args) + 1e-2\n",
    "wrong_on_negatives": _BASE
    + "    def forward(self, *args):\n        return super().forward(*(a.clamp(min=0) for a in args))\n",
    "perturbed_weights": _BASE
    + "    def __init__(self, *args):\n"
    + "        super().__init__(*args)\n"
    + "        with torch.no_grad():\n"
    + "            for p in self.parameters():\n"
    + "                p.add_(1e-3)\n",
    "one_index_off": _BASE
    + "    def forward(self, *args):\n"
    + "        out = super().forward(*args).clone()\n"
    + "        out.view(-1)[-1] += 1\n"
    + "        return out\n",
}

# (task, recipe, smoke sizes, CheckOptions fields, wrong candidates and the assertion message each must raise)
CASES: list[tuple[str, str, dict[str, int], dict[str, Any], dict[str, str]]] = [
    (
        "level1/20_LeakyReLU.py",
        "fusion.elementwise_chain",
        {"batch_size": 3, "dim": 700},
        {"transform": "signed"},
        # the task's own inputs are rand in [0, 1): only the signed copy reaches the negative slope
        {"plus_1e-2": "max abs error", "wrong_on_negatives": "max abs error"},
    ),
    (
        "level1/40_LayerNorm.py",
        "reduction_structure.single_pass_norm",
        {"batch_size": 2, "features": 5, "dim1": 9, "dim2": 11},
        {"transform": "signed_offset"},
        {"plus_1e-2": "max abs error", "perturbed_weights": "weights differ after the same seed"},
    ),
    (
        "level1/52_Argmin_over_a_dimension.py",
        "reduction_structure.dim_reduction",
        {"batch_size": 2, "dim1": 9, "dim2": 11},
        {"transform": "signed_offset", "exact_integers": True},
        {"one_index_off": "indices differ"},
    ),
]


def load_support() -> ModuleType:
    """tests/gpu/rules_gpu_support.py, loaded by path (also outside pytest, in the child process)."""
    if SUPPORT_NAME in sys.modules:
        return sys.modules[SUPPORT_NAME]
    spec = importlib.util.spec_from_file_location(SUPPORT_NAME, SUPPORT_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[SUPPORT_NAME] = module
    spec.loader.exec_module(module)
    return module


def run_scenarios(
    rel: str, key: str, overrides: dict[str, int], options: dict[str, Any], wrong: list[str], directory: Path
) -> list[dict[str, Any]]:
    """In the child: run_case on the CPU for the generated kernel, then for each wrong variant of it."""
    support = load_support()
    task = support.make_task(rel)
    source = support.generate(task, key)
    checks = support.CheckOptions(**{**options, "transform": getattr(support, options["transform"])})
    switches = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    outcomes: list[dict[str, Any]] = []
    for variant in ["", *wrong]:
        candidate = source + WRONG[variant] if variant else source
        try:
            with support.fp32_strict():
                assert torch.backends.cuda.matmul.allow_tf32 is False
                result = support.run_case(
                    task, candidate, directory, checks, device="cpu", overrides=overrides
                )
        except AssertionError as error:
            outcomes.append({"variant": variant, "passed": False, "error": str(error)})
        else:
            outcomes.append({"variant": variant, "passed": True, **vars(result)})
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == switches
    return outcomes


def isolated(function: str, **kwargs: Any) -> Any:
    """Call a function of this module in a fresh process with TRITON_INTERPRET=1 set before any import."""
    run_isolated = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    return run_isolated(__file__, function, kwargs, runtime_warnings_are_errors=True)


@pytest.mark.parametrize(
    ("rel", "key", "overrides", "options", "wrong"), CASES, ids=[c[0].split("/")[1][:-3] for c in CASES]
)
def test_run_case_passes_the_generated_kernel_and_fails_wrong_ones_on_cpu(
    rel: str,
    key: str,
    overrides: dict[str, int],
    options: dict[str, Any],
    wrong: dict[str, str],
    tmp_path: Path,
) -> None:
    outcomes = isolated(
        "run_scenarios",
        rel=rel,
        key=key,
        overrides=overrides,
        options=options,
        wrong=list(wrong),
        directory=str(tmp_path),
    )
    correct, *wrongs = outcomes
    assert correct["passed"], correct
    assert 0.0 <= correct["max_abs_err"] <= 1e-4
    assert correct["kernel_ms"] > 0 and correct["eager_ms"] > 0
    assert [w["variant"] for w in wrongs] == list(wrong)
    for outcome in wrongs:
        assert not outcome["passed"], f"{outcome['variant']} was accepted: {outcome}"
        assert wrong[outcome["variant"]] in outcome["error"], outcome


def test_compare_outputs_checks_every_property() -> None:
    support = load_support()
    torch.manual_seed(0)
    expected = torch.randn(4, 6)
    near = expected + 5e-5  # within atol=1e-4
    assert support.compare_outputs(near, expected, device="cpu").max_abs_err == pytest.approx(5e-5, rel=1e-2)
    with pytest.raises(AssertionError, match="max abs error"):
        support.compare_outputs(expected + 1e-2, expected, device="cpu")
    ratio = support.compare_outputs(near, expected, device="cpu", measure_err_over_tol=True).err_over_tol
    assert 0.0 < ratio < 1.0
    with pytest.raises(AssertionError, match="err/tol"):
        support.compare_outputs(expected * 1.01, expected, device="cpu", measure_err_over_tol=True)
    with pytest.raises(AssertionError, match="dtype"):
        support.compare_outputs(expected.double(), expected, device="cpu")
    with pytest.raises(AssertionError, match="shape"):
        support.compare_outputs(expected[:3], expected, device="cpu")
    with pytest.raises(AssertionError, match="not a tensor"):
        support.compare_outputs((expected,), expected, device="cpu")
    transposed = expected.t().contiguous().t()  # same values, other strides
    support.compare_outputs(transposed, expected, device="cpu")
    with pytest.raises(AssertionError, match="strides"):
        support.compare_outputs(transposed, expected, device="cpu", check_strides=True)
    indices = torch.arange(20000, 20006)
    # allclose alone would accept an index off by one here (rtol * 20000 > 1); the exact check does not
    assert torch.allclose(indices + 1, indices, rtol=1e-4, atol=1e-4)
    with pytest.raises(AssertionError, match="indices differ"):
        support.compare_outputs(indices + 1, indices, device="cpu", exact_integers=True)
    support.compare_outputs(indices.clone(), indices, device="cpu", exact_integers=True)


def test_fp32_strict_turns_tf32_off_and_restores_it() -> None:
    support = load_support()
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        with pytest.raises(RuntimeError), support.fp32_strict():
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
            raise RuntimeError("restored even on error")
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_transforms_change_only_floating_point_inputs() -> None:
    support = load_support()
    x, n = torch.tensor([0.0, 0.5, 1.0]), torch.tensor([1, 2, 3])
    out = support.transformed([x.clone(), n], support.signed_offset)
    assert torch.equal(out[0], torch.tensor([7.0, 10.0, 13.0])) and out[1] is n
    assert torch.equal(support.transformed([x.clone()], support.signed)[0], torch.tensor([-3.0, 0.0, 3.0]))


# A plain-torch candidate (no Triton), so the loader is checked in process.
PLAIN_CANDIDATE = (
    "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
)


def test_import_candidate_loads_through_the_runtime_loader(tmp_path: Path) -> None:
    support = load_support()
    module = support.import_candidate(PLAIN_CANDIDATE, tmp_path)
    assert Path(module.__file__).parent == tmp_path  # a real file: @triton.jit reads the source
    assert Path(module.__file__).read_text(encoding="utf-8") == PLAIN_CANDIDATE
    assert module.__name__ not in sys.modules
    assert torch.equal(module.ModelNew()(torch.ones(3)), torch.full((3,), 2.0))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            PLAIN_CANDIDATE + "raise ValueError('broken at import')\n",
            "(compile_error): the candidate module failed to load: ValueError: broken at import",
        ),
        (PLAIN_CANDIDATE + "def broken(:\n", "(compile_error): SyntaxError: "),
        ("import torch\n\nclass Model(torch.nn.Module):\n    pass\n", "does not define a class ModelNew"),
    ],
    ids=["raises_at_import", "syntax_error", "no_model_new"],
)
def test_import_candidate_fails_the_test_with_the_runtime_message(
    source: str, message: str, tmp_path: Path
) -> None:
    support = load_support()
    with pytest.raises(pytest.fail.Exception) as failed:
        support.import_candidate(source, tmp_path)
    assert str(failed.value).startswith("the candidate did not load (compile_error): ")
    assert message in str(failed.value)
