"""Imports Robust-KBench task folders: `func_forward.py` + `config_forward.json` → KernelBench-form tasks.

A Robust-KBench task folder holds `func_forward.py` (a functional `forward_fn`, a `Model` whose forward calls
it, and `get_inputs` taking keyword sizes) and `config_forward.json` (lists of input, init and shared
configurations, each a `single_*` and a `multi_*` list). A folder holding either file is a task folder; any
folder below the import path is searched. Parsing is static: nothing of the task runs here.

Each task becomes one htam-graph task whose source is the original file followed by a generated block
(`source_block`) that makes it KernelBench-form: module-level constants hold the default (first single)
configuration, `get_inputs()` / `get_init_inputs()` pass them on (input keys to `get_inputs`, init keys to
`Model`, shared keys to both, each only where the signature takes it), and `HTAM_TASK_VARIANTS` declares every
other configuration (the rest of the single product, then the `multi_*` product
input × init × shared) for the runtime's `task_configs` check. Non-integer values (an init method, an eps)
become an index constant `<key>_value` into a `<KEY>_OPTIONS` tuple, so every configuration is a set of
integer overrides. Keys: `robust-kbench/<folder name>`.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from htam_graph.errors import TaskError
from htam_graph.importers.kernelbench import ScanResult, SkipReason
from htam_graph.importers.optags import op_tags_of_tree
from htam_graph.model import Task

__all__ = [
    "SUITE",
    "FUNC_FILE",
    "CONFIG_FILE",
    "is_task_dir",
    "discover",
    "holds_tasks",
    "parse_task_dir",
    "scan",
]

SUITE = "robust-kbench"
FUNC_FILE = "func_forward.py"
CONFIG_FILE = "config_forward.json"
_KINDS = ("input", "init", "shared")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
Scalar = int | float | str | bool | None


class _Malformed(Exception):
    """Why one task folder cannot be imported (one line)."""


def is_task_dir(path: Path) -> bool:
    """Whether `path` is a Robust-KBench task folder (it holds func_forward.py or config_forward.json)."""
    return path.is_dir() and ((path / FUNC_FILE).is_file() or (path / CONFIG_FILE).is_file())


def discover(path: Path) -> list[Path]:
    """Task folders at or below `path` (sorted; hidden folders skipped). Raises TaskError when `path` is
    missing."""
    if not path.exists():
        raise TaskError(f"no such file or folder: {path}")
    if not path.is_dir():
        return []
    found = {f.parent for name in (FUNC_FILE, CONFIG_FILE) for f in path.rglob(name) if f.is_file()}
    return sorted(d for d in found if not any(part.startswith(".") for part in d.relative_to(path).parts))


def holds_tasks(path: Path) -> bool:
    """Whether `path` is a Robust-KBench task folder or a folder with some below it (format detection)."""
    return path.is_dir() and bool(discover(path))


# ------------------------------------------------------------------------------------------- config file
def _config_list(data: dict[str, Any], prefix: str, kind: str) -> list[dict[str, Scalar | list[int]]]:
    """One list; a missing multi list is its single list, a missing single list the multi list's first
    entry."""
    name = f"{prefix}_{kind}_configs"
    other = f"{'multi' if prefix == 'single' else 'single'}_{kind}_configs"
    if name in data:
        value = data[name]
    elif other in data and isinstance(data[other], list):
        value = data[other][:1] if prefix == "single" else data[other]
    else:
        value = [{}]
    if not isinstance(value, list) or not value or not all(isinstance(c, dict) for c in value):
        raise _Malformed(f"{CONFIG_FILE}: {name} must be a non-empty list of objects")
    for config in value:
        for key, v in config.items():
            ok_list = isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
            if not (isinstance(v, int | float | str | bool) or v is None or ok_list):
                raise _Malformed(f"{CONFIG_FILE}: {name}: {key!r} has a value of type {type(v).__name__}")
    return value


@dataclass(frozen=True)
class _Config:
    """One combined configuration: its values and which side each key goes to."""

    values: dict[str, Any]
    kinds: dict[str, set[str]]


def _product(data: dict[str, Any], prefix: str) -> list[_Config]:
    if prefix == "multi" and not any(f"multi_{kind}_configs" in data for kind in _KINDS):
        return []  # no multi configurations: the task is checked at its single ones only
    lists = [_config_list(data, prefix, kind) for kind in _KINDS]
    out = []
    for combo in itertools.product(*lists):
        values: dict[str, Any] = {}
        kinds: dict[str, set[str]] = {}
        for kind, config in zip(_KINDS, combo, strict=True):
            for key, value in config.items():
                if key in values and values[key] != value:
                    raise _Malformed(f"{CONFIG_FILE}: {key!r} has two values in one {prefix} configuration")
                values[key] = value
                kinds.setdefault(key, set()).add(kind)
        out.append(_Config(values, kinds))
    return out


def _read_configs(folder: Path) -> list[tuple[str, _Config]]:
    """(name, configuration) in order: single1 (the default), further single ones, then multi1..."""
    try:
        data = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except OSError as e:
        raise _Malformed(f"cannot read {CONFIG_FILE}: {e.strerror or e}") from e
    except ValueError as e:
        raise _Malformed(f"{CONFIG_FILE} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise _Malformed(f"{CONFIG_FILE} must hold a JSON object")
    unknown = [k for k in data if not re.fullmatch(r"(single|multi)_(input|init|shared)_configs", k)]
    if unknown:
        raise _Malformed(f"{CONFIG_FILE}: unknown field {unknown[0]!r}")
    named = [(f"single{i}", c) for i, c in enumerate(_product(data, "single"), 1)]
    named += [(f"multi{i}", c) for i, c in enumerate(_product(data, "multi"), 1)]
    keys = {k for _, c in named for k in c.values}
    if any(set(c.values) != keys for _, c in named):
        raise _Malformed(
            f"{CONFIG_FILE}: every configuration must set the same keys ({', '.join(sorted(keys))})"
        )
    return named


# ------------------------------------------------------------------------------------------- signatures
def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    found = None
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            found = stmt
    return found


def _model_init(tree: ast.Module) -> ast.FunctionDef | None:
    model = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"), None)
    if model is None:
        raise _Malformed(f"{FUNC_FILE}: no class Model")
    return next((s for s in model.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)


def _accepts(fn: ast.FunctionDef | None, key: str, skip_self: bool = False) -> bool:
    if fn is None:
        return False
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]
    return key in params[1 if skip_self else 0 :] or fn.args.kwarg is not None


def _positional_init(init: ast.FunctionDef | None, given: dict[str, str]) -> list[str]:
    """Expressions for Model's positional parameters up to the last configured one (defaults in between)."""
    if not given:
        return []
    if init is None:
        raise _Malformed(f"Model takes no arguments but the configurations set {', '.join(sorted(given))}")
    params = [*init.args.posonlyargs, *init.args.args][1:]
    names = [a.arg for a in params]
    unknown = [k for k in given if k not in names]
    if unknown:
        raise _Malformed(
            f"Model.__init__ has no positional parameter {unknown[0]!r} (set by the configurations)"
        )
    defaults = dict(zip(names[len(names) - len(init.args.defaults) :], init.args.defaults, strict=True))
    last = max(names.index(k) for k in given)
    out = []
    for name in names[: last + 1]:
        if name in given:
            out.append(given[name])
        elif name in defaults:
            out.append(ast.unparse(defaults[name]))
        else:
            raise _Malformed(f"Model.__init__ parameter {name!r} has no default and no configured value")
    return out


# ------------------------------------------------------------------------------------------- generated block
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _options(configs: list[tuple[str, _Config]]) -> dict[str, list[Any]]:
    """Keys that cannot be integer constants (a string, a float, a bool, None, or int lists of differing
    lengths), each with its distinct values in order of first use. The other keys are int / int-list
    constants."""
    values: dict[str, list[Any]] = {}
    for _, config in configs:
        for key, value in config.values.items():
            seen = values.setdefault(key, [])
            if not any(type(v) is type(value) and v == value for v in seen):
                seen.append(value)
    opts: dict[str, list[Any]] = {}
    for key, seen in values.items():
        if all(_is_int(v) for v in seen):
            continue
        if all(isinstance(v, list) for v in seen) and len({len(v) for v in seen}) == 1:
            continue  # int lists of one length: a tuple constant (overridable, scaled at smoke sizes)
        opts[key] = seen
    return opts


def _constant_name(key: str, options: dict[str, list[Any]]) -> str:
    return f"{key}_value" if key in options else key


def _value_expr(key: str, value: Any, options: dict[str, list[Any]]) -> str:
    if key in options:
        return f"{key.upper()}_OPTIONS[{key}_value]"
    return f"list({key})" if isinstance(value, list) else key


def _overrides(config: _Config, options: dict[str, list[Any]]) -> dict[str, int | list[int]]:
    out: dict[str, int | list[int]] = {}
    for key, value in config.values.items():
        if key in options:
            out[f"{key}_value"] = next(
                i for i, v in enumerate(options[key]) if type(v) is type(value) and v == value
            )
        else:
            out[key] = value
    return out


def _label(name: str, config: _Config) -> str:
    return " ".join([name, *(f"{k}={json.dumps(v)}" for k, v in config.values.items())])


def _check_names(tree: ast.Module, keys: list[str], options: dict[str, list[Any]]) -> None:
    taken = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            taken |= {(a.asname or a.name).split(".")[0] for a in node.names}
    for key in keys:
        if not key.isidentifier() or keyword.iskeyword(key) or key.startswith("_"):
            raise _Malformed(f"{CONFIG_FILE}: key {key!r} is not a usable Python name")
        generated = {key, f"{key}_value", f"{key.upper()}_OPTIONS"} if key in options else {key}
        clash = generated & (taken | {"HTAM_TASK_VARIANTS", "get_init_inputs", "get_inputs"})
        if clash:
            raise _Malformed(
                f"{CONFIG_FILE}: key {key!r} clashes with the name {sorted(clash)[0]!r} in {FUNC_FILE}"
            )


def source_block(tree: ast.Module, configs: list[tuple[str, _Config]]) -> str:
    """The generated KernelBench-form block appended to the task's own source (see the module docstring)."""
    default = configs[0][1]
    options = _options(configs)
    keys = list(default.values)
    _check_names(tree, keys, options)
    get_inputs = _function(tree, "get_inputs")
    if get_inputs is None:
        raise _Malformed(f"{FUNC_FILE}: no function get_inputs")
    init = _model_init(tree)
    own_init_inputs = _function(tree, "get_init_inputs")
    to_inputs, to_init = [], {}
    for key, value in default.values.items():
        kinds = default.kinds[key]
        used = False
        if kinds & {"input", "shared"} and _accepts(get_inputs, key):
            to_inputs.append(f"{key}={_value_expr(key, value, options)}")
            used = True
        takes_init = (
            _accepts(own_init_inputs, key) if own_init_inputs else _accepts(init, key, skip_self=True)
        )
        if kinds & {"init", "shared"} and takes_init:
            to_init[key] = _value_expr(key, value, options)
            used = True
        if not used:
            raise _Malformed(f"configuration key {key!r} is taken by neither get_inputs nor Model")
    lines = [
        "",
        "",
        "# ---- htam-graph: Robust-KBench configurations (generated from config_forward.json) ----",
        "# The constants below are the default configuration (timed). "
        "A candidate must also be correct at every",
        "# configuration in HTAM_TASK_VARIANTS (each overrides these constants; checked by the evaluator).",
    ]
    defaults = _overrides(default, options)
    for key in default.values:
        if key in options:
            lines.append(f"{key.upper()}_OPTIONS = {tuple(options[key])!r}")
        lines.append(f"{_constant_name(key, options)} = {defaults[_constant_name(key, options)]!r}")
    lines.append("HTAM_TASK_VARIANTS = {")
    lines += [f"    {_label(n, c)!r}: {_overrides(c, options)!r}," for n, c in configs[1:]]
    lines.append("}")
    lines += ["", "_robust_kbench_get_inputs = get_inputs", "", "", "def get_inputs():"]
    lines.append(f"    return list(_robust_kbench_get_inputs({', '.join(to_inputs)}))")
    if own_init_inputs is not None:
        lines += [
            "",
            "",
            "_robust_kbench_get_init_inputs = get_init_inputs",
            "",
            "",
            "def get_init_inputs():",
        ]
        args = ", ".join(f"{k}={v}" for k, v in to_init.items())
        lines.append(f"    return list(_robust_kbench_get_init_inputs({args}))")
    else:
        lines += ["", "", "def get_init_inputs():"]
        lines.append(f"    return [{', '.join(_positional_init(init, to_init))}]")
    return "\n".join(lines) + "\n"


def _dedupe(configs: list[tuple[str, _Config]]) -> list[tuple[str, _Config]]:
    out: list[tuple[str, _Config]] = []
    for name, config in configs:
        if all(config.values != c.values for _, c in out):
            out.append((name, config))
    return out


# ------------------------------------------------------------------------------------------- tasks
def _display(folder: Path, root: Path) -> str:
    try:
        rel = folder.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = folder.name
    return folder.name if rel in ("", ".") else rel


def parse_task_dir(folder: Path, root: Path | None = None) -> Task | SkipReason:
    """One task folder → a `Task` (its source: the original plus the generated block), or why it is not
    one."""
    shown = _display(folder, root or folder)
    try:
        if not (folder / FUNC_FILE).is_file():
            raise _Malformed(f"no {FUNC_FILE}")
        if not (folder / CONFIG_FILE).is_file():
            raise _Malformed(f"no {CONFIG_FILE}")
        try:
            original = (folder / FUNC_FILE).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise _Malformed(f"cannot read {FUNC_FILE}: {e}") from e
        try:
            tree = ast.parse(original)
        except SyntaxError as e:
            raise _Malformed(f"{FUNC_FILE}: syntax error at line {e.lineno}: {e.msg}") from e
        source = original.rstrip("\n") + "\n" + source_block(tree, _dedupe(_read_configs(folder)))
    except _Malformed as e:
        return SkipReason(shown, str(e))
    name = _NAME_CHARS.sub("-", folder.resolve().name).strip("-") or "task"
    return Task(
        key=f"{SUITE}/{name}",
        suite=SUITE,
        level=None,
        name=name,
        source=source,
        source_sha256=hashlib.sha256(source.encode("utf-8")).hexdigest(),
        op_tags=op_tags_of_tree(tree),
        path=shown,
    )


def scan(path: Path) -> ScanResult:
    """Every task folder at or below `path`; a later folder with an already-seen key is skipped.

    Raises TaskError (one line) when `path` holds no task folder, or none of them could be imported.
    """
    folders = discover(path)
    if not folders:
        raise TaskError(f"no Robust-KBench task folder ({FUNC_FILE} + {CONFIG_FILE}) under {path}")
    tasks: list[Task] = []
    skipped: list[SkipReason] = []
    seen: dict[str, str] = {}
    for folder in folders:
        parsed = parse_task_dir(folder, path)
        if isinstance(parsed, SkipReason):
            skipped.append(parsed)
        elif parsed.key in seen:
            skipped.append(
                SkipReason(
                    parsed.path or folder.name, f"duplicate key {parsed.key} (also {seen[parsed.key]})"
                )
            )
        else:
            seen[parsed.key] = parsed.path or folder.name
            tasks.append(parsed)
    if not tasks:
        first = skipped[0]
        raise TaskError(f"no valid Robust-KBench task under {path}: {first.path}: {first.reason}")
    return ScanResult(tasks, skipped)
