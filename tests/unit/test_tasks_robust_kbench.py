"""The Robust-KBench importer on the sample task folder (tests/data/robust_kbench) and on malformed folders."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from htam_graph.errors import TaskError
from htam_graph.importers import robust_kbench
from htam_graph.importers.formats import scan_path
from htam_graph.importers.kernelbench import SkipReason, parse_task
from htam_graph.kernels_runtime.worker import taskmod, variants
from htam_graph.model import Task

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "robust_kbench"
CONFIG = json.loads((SAMPLE / "layernorm" / "config_forward.json").read_text(encoding="utf-8"))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A writable copy of the sample: checkout/tasks/layernorm."""
    root = tmp_path / "checkout"
    shutil.copytree(SAMPLE / "layernorm", root / "tasks" / "layernorm")
    return root


def _task(path: Path) -> Task:
    found = robust_kbench.scan(path)
    assert len(found.tasks) == 1 and not found.skipped, found.skipped
    return found.tasks[0]


def _configs(task: Task) -> dict[str, dict[str, object]]:
    """The (input, init, shared) values each configuration gives to get_inputs and Model, by running them."""
    torch = pytest.importorskip("torch")
    out: dict[str, dict[str, object]] = {}
    named = [("default", {})] + [(v.name, v.overrides) for v in variants.declared_variants(task.source)]
    for name, overrides in named:
        module = taskmod.load_task_module(task.source, task.key, overrides)
        init = module.get_init_inputs()
        with torch.device("meta"):
            (x,) = module.get_inputs()
        out[name] = {"x": tuple(x.shape), "init": init}
    return out


def test_sample_becomes_one_kernelbench_form_task(checkout: Path) -> None:
    task = _task(checkout)
    assert (task.key, task.suite, task.level, task.name) == (
        "robust-kbench/layernorm",
        "robust-kbench",
        None,
        "layernorm",
    )
    assert task.path == "tasks/layernorm" and task.op_tags == ["norm"]
    original = (SAMPLE / "layernorm" / "func_forward.py").read_text(encoding="utf-8")
    assert task.source.startswith(original.rstrip("\n"))  # the user's code is kept verbatim
    written = checkout / "tasks" / "layernorm" / "task.py"
    written.write_text(task.source, encoding="utf-8")
    assert not isinstance(
        parse_task(written), SkipReason
    )  # KernelBench-form: Model, get_inputs, get_init_inputs


def test_default_is_the_single_config_and_every_multi_config_is_a_variant(checkout: Path) -> None:
    configs = _configs(_task(checkout))
    assert configs["default"] == {"x": (1, 64, 256, 256), "init": [64, 256, 256, 1e-05, "random"]}
    multi = {name.split()[0]: value for name, value in configs.items() if name != "default"}
    # multi = input x init x shared (2 x 2 x 2); multi2 (batch 1, random, 64 features) is the default: dropped
    assert sorted(multi) == ["multi1", "multi3", "multi4", "multi5", "multi6", "multi7", "multi8"]
    assert multi["multi1"] == {"x": (1, 1, 256, 256), "init": [1, 256, 256, 1e-05, "random"]}
    assert multi["multi8"] == {"x": (8, 64, 256, 256), "init": [64, 256, 256, 1e-05, "standard"]}
    expected = {
        (i["batch_size"], n["init_method"], s["num_features"])
        for i in CONFIG["multi_input_configs"]
        for n in CONFIG["multi_init_configs"]
        for s in CONFIG["multi_shared_configs"]
    }
    seen = {(v["x"][0], v["init"][4], v["init"][0]) for v in configs.values()}  # type: ignore[index]
    assert seen == expected


def test_variant_names_spell_out_the_config() -> None:
    task = _task(SAMPLE)
    names = [v.name for v in variants.declared_variants(task.source)]
    assert 'multi5 batch_size=8 init_method="random" num_features=1 dim1=256 dim2=256' in names


def test_a_changed_config_changes_the_source_hash(checkout: Path) -> None:
    before = _task(checkout)
    config = dict(CONFIG, multi_input_configs=[{"batch_size": 1}, {"batch_size": 4}])
    (checkout / "tasks" / "layernorm" / "config_forward.json").write_text(
        json.dumps(config), encoding="utf-8"
    )
    after = _task(checkout)
    assert after.source_sha256 != before.source_sha256 and "batch_size=4" in after.source


def test_format_detection(checkout: Path) -> None:
    assert [t.key for t in scan_path(checkout).tasks] == ["robust-kbench/layernorm"]
    func = checkout / "tasks" / "layernorm" / "func_forward.py"
    assert [t.key for t in scan_path(func).tasks] == ["robust-kbench/layernorm"]
    kb = checkout.parent / "kb" / "level1"
    kb.mkdir(parents=True)
    (kb / "1_Copy.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
        "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n",
        encoding="utf-8",
    )
    assert [t.key for t in scan_path(kb.parent).tasks] == ["kb/level1/1_Copy"]


def _malformed(checkout: Path, name: str, text: str) -> str:
    (checkout / "tasks" / "layernorm" / name).write_text(text, encoding="utf-8")
    with pytest.raises(TaskError) as info:
        robust_kbench.scan(checkout)
    message = str(info.value)
    assert "\n" not in message and "tasks/layernorm" in message
    return message


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("config_forward.json", "{not json", "not valid JSON"),
        ("config_forward.json", "[1, 2]", "must hold a JSON object"),
        ("config_forward.json", '{"multi_input_configs": []}', "non-empty list"),
        ("config_forward.json", '{"single_input_configs": [{"batch_size": {"a": 1}}]}', "type dict"),
        ("config_forward.json", '{"single_inputs": [{}]}', "unknown field 'single_inputs'"),
        ("config_forward.json", '{"single_input_configs": [{"colour": 3}]}', "neither get_inputs nor Model"),
        ("config_forward.json", '{"single_input_configs": [{"get_inputs": 3}]}', "clashes"),
        (
            "config_forward.json",
            '{"single_input_configs": [{"batch_size": 1}], "multi_input_configs": [{"dim1": 3}]}',
            "same keys",
        ),
        ("func_forward.py", "def get_inputs(:\n", "syntax error"),
        ("func_forward.py", "def get_inputs(batch_size=1):\n    return []\n", "no class Model"),
    ],
)
def test_malformed_folder_is_one_clear_line(checkout: Path, name: str, text: str, why: str) -> None:
    assert why in _malformed(checkout, name, text)


def test_missing_file_and_skips_next_to_a_valid_task(checkout: Path) -> None:
    broken = checkout / "tasks" / "broken"
    broken.mkdir()
    (broken / "config_forward.json").write_text("{}", encoding="utf-8")
    found = robust_kbench.scan(checkout)
    assert [t.key for t in found.tasks] == ["robust-kbench/layernorm"]
    assert [(s.path, s.reason) for s in found.skipped] == [("tasks/broken", "no func_forward.py")]


def test_no_task_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no Robust-KBench task folder"):
        robust_kbench.scan(tmp_path)
    with pytest.raises(TaskError, match="no such file"):
        robust_kbench.scan(tmp_path / "nope")


def test_generated_block_is_readable_python(checkout: Path) -> None:
    block = _task(checkout).source.split("# ---- htam-graph: Robust-KBench configurations", 1)[1]
    assert "INIT_METHOD_OPTIONS = ('random', 'standard')" in block
    assert "init_method_value = 0" in block and "batch_size = 1" in block
    ast.parse(_task(checkout).source)


SCALE_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, scale=1.0, shift=0.0):
        super().__init__()
        self.w = nn.Parameter(torch.ones(dim))
        self.scale, self.shift = scale, shift

    def forward(self, x):
        return x * self.w * self.scale + self.shift


def get_inputs(batch_size=2, dim=4, shape=(3,)):
    return [torch.randn(batch_size, *shape, dim)]
"""


def test_float_list_and_shared_values_and_defaults_in_between(tmp_path: Path) -> None:
    folder = tmp_path / "scale"
    folder.mkdir()
    (folder / "func_forward.py").write_text(SCALE_TASK, encoding="utf-8")
    config = {
        "single_input_configs": [{"batch_size": 2, "shape": [3]}],
        "single_init_configs": [{"shift": 0.5}],
        "single_shared_configs": [{"dim": 4}],
        "multi_input_configs": [{"batch_size": 2, "shape": [3]}, {"batch_size": 3, "shape": [5, 2]}],
        "multi_init_configs": [{"shift": 0.5}, {"shift": -1.0}],
    }  # no multi_shared_configs: the single one is used
    (folder / "config_forward.json").write_text(json.dumps(config), encoding="utf-8")
    task = _task(folder)
    assert "SHIFT_OPTIONS = (0.5, -1.0)" in task.source
    assert "SHAPE_OPTIONS = ([3], [5, 2])" in task.source  # lists of two lengths: options, not constants
    configs = _configs(task)
    assert configs["default"] == {"x": (2, 3, 4), "init": [4, 1.0, 0.5]}  # scale: Model's own default
    assert sorted(map(str, configs.values())) == sorted(
        map(str, [
            {"x": (2, 3, 4), "init": [4, 1.0, 0.5]},
            {"x": (2, 3, 4), "init": [4, 1.0, -1.0]},
            {"x": (3, 5, 2, 4), "init": [4, 1.0, 0.5]},
            {"x": (3, 5, 2, 4), "init": [4, 1.0, -1.0]},
        ])
    )  # fmt: skip


def test_own_get_init_inputs_receives_the_init_keys(tmp_path: Path) -> None:
    folder = tmp_path / "own"
    folder.mkdir()
    source = SCALE_TASK + "\n\ndef get_init_inputs(dim=4, shift=0.0):\n    return [dim, 2.0, shift]\n"
    (folder / "func_forward.py").write_text(source, encoding="utf-8")
    config = {"single_init_configs": [{"shift": 0.25}], "single_shared_configs": [{"dim": 6}]}
    (folder / "config_forward.json").write_text(json.dumps(config), encoding="utf-8")
    task = _task(folder)
    assert variants.declared_variants(task.source) == []  # no multi configurations: nothing more to check
    assert _configs(task)["default"] == {"x": (2, 3, 6), "init": [6, 2.0, 0.25]}


def test_keyword_only_model_parameter_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "kw"
    folder.mkdir()
    source = SCALE_TASK.replace(
        "def __init__(self, dim, scale=1.0, shift=0.0)", "def __init__(self, dim, *, shift=0.0)"
    )
    source = source.replace("self.scale, self.shift = scale, shift", "self.scale, self.shift = 1.0, shift")
    (folder / "func_forward.py").write_text(source, encoding="utf-8")
    config = {"single_init_configs": [{"shift": 0.25}], "single_shared_configs": [{"dim": 6}]}
    (folder / "config_forward.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(TaskError, match="no positional parameter 'shift'"):
        robust_kbench.scan(folder)


@pytest.mark.parametrize(
    ("declaration", "why"),
    [
        ("HTAM_TASK_VARIANTS = [1]", "must be a dict"),
        ("HTAM_TASK_VARIANTS = {'a': {'n': 'big'}}", "not an int or int tuple"),
        ("HTAM_TASK_VARIANTS = {'a': 3}", "entries must be"),
        ("HTAM_TASK_VARIANTS = {'a': {'n': f(1)}}", "not a literal"),
    ],
)
def test_bad_variant_declarations_are_task_errors(declaration: str, why: str) -> None:
    with pytest.raises(TaskError, match=why):
        variants.declared_variants(f"n = 4\n{declaration}\n", "t")


def test_declared_variants_parse_in_order() -> None:
    source = "n = 4\nshape = (2, 3)\nHTAM_TASK_VARIANTS = {'b': {'n': 8}, 'a': {'shape': [4, 5]}}\n"
    assert variants.declared_variants(source) == [
        variants.NamedVariant("b", {"n": 8}),
        variants.NamedVariant("a", {"shape": (4, 5)}),
    ]
    # at the default shape the overrides are as declared; a configuration equal to the module's values is dropped
    same = source.replace("'b': {'n': 8}", "'b': {'n': 4}")
    assert variants.configurations(same, "default", {}) == [("a", {"shape": (4, 5)})]


def test_int_lists_of_one_length_stay_overridable_constants(tmp_path: Path) -> None:
    folder = tmp_path / "lists"
    folder.mkdir()
    (folder / "func_forward.py").write_text(SCALE_TASK, encoding="utf-8")
    config = {
        "single_input_configs": [{"shape": [3]}],
        "single_shared_configs": [{"dim": 4}],
        "multi_input_configs": [{"shape": [3]}, {"shape": [7]}],
    }
    (folder / "config_forward.json").write_text(json.dumps(config), encoding="utf-8")
    task = _task(folder)
    assert "shape = [3]" in task.source
    assert [v.overrides for v in variants.declared_variants(task.source)] == [{"shape": (7,), "dim": 4}]
    assert _configs(task)["default"]["x"] == (2, 3, 4)
