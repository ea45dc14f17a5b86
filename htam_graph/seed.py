"""Loads and validates the seed memory: the reviewable YAML file that initialises the HTG.

The packaged file is `htam_graph/data/seed_memory.yaml`. Loading checks the schema (`SeedMemory`) and the
cross-references the schema cannot express: unique keys, locals attached to known globals and named
`<global_key>.<snake_name>`, transitions between known globals, op tags from `OP_TAGS`, non-empty languages
and texts. Every problem is reported as one `SeedError` line naming the file, the entry and the field.

Pure core module: nothing is read until a function is called.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Hashable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from htam_graph.errors import SeedError
from htam_graph.model import SeedMemory

SUPPORTED_VERSIONS: frozenset[int] = frozenset({1})

# Task op tags a strategy may name (the same vocabulary tasks are tagged with). Empty op_tags = any task.
OP_TAGS: frozenset[str] = frozenset(
    {
        "matmul",
        "conv",
        "conv_transpose",
        "elementwise",
        "activation",
        "reduction",
        "softmax",
        "norm",
        "pooling",
        "scan",
        "indexing",
        "loss",
        "attention",
        "rnn",
        "broadcast",
    }
)

_SNAKE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_SEED_RESOURCE = "data/seed_memory.yaml"


# libyaml's parser where PyYAML was built with it (the pure-Python one parses the packaged seed ~10x slower,
# and every `run`, `bench` and `memory` command reads it); the constructors are the same safe ones.
_SafeLoaderBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeySafeLoader(_SafeLoaderBase):  # type: ignore[misc,valid-type]
    """A safe loader that rejects duplicate mapping keys.

    Plain `safe_load` keeps the last of two equal keys silently; in a reviewed file that hides an edit.
    """


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Hashable] = set()
    for key_node, _value_node in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} in one mapping", key_node.start_mark
            )
        if isinstance(key, Hashable):
            seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeySafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def default_seed_path() -> Traversable:
    """The seed file shipped with the package."""
    return resources.files("htam_graph").joinpath(_SEED_RESOURCE)


def load_seed(path: Path | None = None) -> SeedMemory:
    """Read, parse and validate a seed file (default: the packaged one).

    Raises `SeedError` with one line for an unreadable file, a YAML syntax error (with its line), a schema
    violation (entry and field), or a broken cross-reference (see `validate_seed`).
    """
    source = default_seed_path() if path is None else path
    name = str(source)
    text = _read_text(source, name)
    data = _parse_yaml(text, name)
    seed = _validate_schema(data, name)
    problems = validate_seed(seed)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise SeedError(f"seed file {name}: {problems[0]}{more}")
    return seed


def seed_sha256(path: Path | None = None) -> str:
    """Hex SHA-256 of the seed file's bytes (default: the packaged file), to record which seed a graph
    used."""
    source = default_seed_path() if path is None else path
    return hashlib.sha256(_read_bytes(source, str(source))).hexdigest()


def validate_seed(seed: SeedMemory) -> list[str]:
    """Cross-reference problems of a schema-valid seed, in file order; empty when the seed is sound."""
    problems: list[str] = []
    if seed.version not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_VERSIONS))
        problems.append(f"version {seed.version} is not supported (supported: {supported})")
    problems += _global_problems(seed)
    problems += _local_problems(seed)
    problems += _transition_problems(seed)
    return problems


# ----------------------------------------------------------------------------------------------- reading
def _read_bytes(source: Path | Traversable, name: str) -> bytes:
    try:
        return source.read_bytes()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise SeedError(f"cannot read seed file {name}: {reason}") from e


def _read_text(source: Path | Traversable, name: str) -> str:
    try:
        return _read_bytes(source, name).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SeedError(f"seed file {name} is not UTF-8 text (byte {e.start})") from e


def _parse_yaml(text: str, name: str) -> dict[str, Any]:
    try:
        # Safe: a SafeLoader subclass (plain safe_load would keep the last of two duplicate keys silently).
        data = yaml.load(text, Loader=_UniqueKeySafeLoader)
    except yaml.MarkedYAMLError as e:
        where = ""
        if e.problem_mark is not None:
            where = f" at line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}"
        what = e.problem or e.context or "malformed YAML"
        raise SeedError(f"seed file {name}: YAML error{where}: {what}") from e
    except yaml.YAMLError as e:
        raise SeedError(f"seed file {name}: YAML error: {_one_line(str(e))}") from e
    if not isinstance(data, dict):
        found = "an empty document" if data is None else f"a {type(data).__name__}"
        raise SeedError(f"seed file {name}: expected a mapping with version/globals/locals, found {found}")
    return data


def _validate_schema(data: dict[str, Any], name: str) -> SeedMemory:
    try:
        return SeedMemory.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        first = _describe_schema_error(data, errors[0])
        more = f" (and {len(errors) - 1} more schema error(s))" if len(errors) > 1 else ""
        raise SeedError(f"seed file {name}: {first}{more}") from e


def _describe_schema_error(data: dict[str, Any], error: Any) -> str:
    """'locals[3] (key 'x.y'): field 'pattern': Field required' from one pydantic error."""
    loc: tuple[int | str, ...] = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        message = "unknown field (not in the schema)"
    else:
        message = _one_line(str(error["msg"]))
    if not loc:
        return message
    section = str(loc[0])
    if len(loc) == 1:
        return f"top-level field {section!r}: {message}"
    entry = f"{section}[{loc[1]}]"
    label = _entry_label(data.get(section), loc[1])
    if label:
        entry += f" ({label})"
    field = ".".join(str(part) for part in loc[2:])
    return f"{entry}: field {field!r}: {message}" if field else f"{entry}: {message}"


def _entry_label(section: object, index: int | str) -> str:
    if not isinstance(section, list) or not isinstance(index, int) or index >= len(section):
        return ""
    entry = section[index]
    if not isinstance(entry, dict):
        return ""
    if "key" in entry:
        return f"key {entry['key']!r}"
    if "src" in entry or "dst" in entry:
        return f"{entry.get('src')!r} -> {entry.get('dst')!r}"
    return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ----------------------------------------------------------------------------------------------- cross-checks
def _duplicates(section: str, what: str, values: list[str]) -> list[str]:
    """One problem per value that `values` holds more than once (`what` names it: key, transition)."""
    return [f"{section}: duplicate {what} {value}" for value, count in Counter(values).items() if count > 1]


def _blank_fields(where: str, entry: Any, fields: tuple[str, ...]) -> list[str]:
    """One problem per text field (or list field with an item) of `entry` that is empty or whitespace."""
    blank: list[str] = []
    for field in fields:
        value = getattr(entry, field)
        items = value if isinstance(value, list) else [value]
        if any(not str(item).strip() for item in items):
            blank.append(f"{where}: field {field!r} is empty or blank")
    return blank


def _global_problems(seed: SeedMemory) -> list[str]:
    problems: list[str] = []
    for i, g in enumerate(seed.globals):
        where = f"globals[{i}] (key {g.key!r})"
        if not _SNAKE_RE.match(g.key):
            problems.append(f"{where}: key must be snake_case ([a-z][a-z0-9_]*)")
        problems += _blank_fields(where, g, ("name", "intent", "goals", "triggers", "risks"))
    return problems + _duplicates("globals", "key", [repr(g.key) for g in seed.globals])


def _local_problems(seed: SeedMemory) -> list[str]:
    problems: list[str] = []
    global_keys = {g.key for g in seed.globals}
    for i, loc in enumerate(seed.locals):
        where = f"locals[{i}] (key {loc.key!r})"
        if loc.global_key not in global_keys:
            problems.append(f"{where}: global_key {loc.global_key!r} is not a key under globals")
        prefix, _, suffix = loc.key.partition(".")
        if prefix != loc.global_key or not _SNAKE_RE.match(suffix):
            problems.append(
                f"{where}: key must be '{loc.global_key}.<snake_name>' (prefixed by its global_key)"
            )
        if not loc.languages:
            problems.append(f"{where}: field 'languages' is empty (name cuda and/or triton)")
        elif len(set(loc.languages)) != len(loc.languages):
            problems.append(f"{where}: field 'languages' repeats a language")
        unknown = sorted(set(loc.op_tags) - OP_TAGS)
        if unknown:
            problems.append(
                f"{where}: unknown op tag(s) {', '.join(map(repr, unknown))} "
                f"(allowed: {', '.join(sorted(OP_TAGS))})"
            )
        outside = sorted(set(loc.requires_tags) - set(loc.op_tags))
        if outside:
            problems.append(
                f"{where}: requires_tags {', '.join(map(repr, outside))} not among its op_tags "
                "(requires_tags name which of its op_tags define the strategy)"
            )
        problems += _blank_fields(where, loc, ("name", "pattern", "applicable_when", "checks", "risks"))
    return problems + _duplicates("locals", "key", [repr(loc.key) for loc in seed.locals])


def _transition_problems(seed: SeedMemory) -> list[str]:
    problems: list[str] = []
    global_keys = {g.key for g in seed.globals}
    for i, t in enumerate(seed.transitions):
        where = f"transitions[{i}] ({t.src!r} -> {t.dst!r})"
        for end, value in (("src", t.src), ("dst", t.dst)):
            if value not in global_keys:
                problems.append(f"{where}: {end} {value!r} is not a key under globals")
        problems += _blank_fields(where, t, ("rationale", "risks", "applicable_when"))
    return problems + _duplicates(
        "transitions", "transition", [f"{t.src!r} -> {t.dst!r}" for t in seed.transitions]
    )
