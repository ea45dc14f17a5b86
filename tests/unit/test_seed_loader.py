"""`load_seed` on malformed files: each problem is one SeedError line that names what is wrong and where."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.errors import SeedError
from htam_graph.seed import load_seed, seed_sha256, validate_seed

MINIMAL = """\
version: 1
globals:
  - key: fusion
    name: Fusion
    intent: merge kernels
  - key: memory_access
    name: Memory access
    intent: coalesce
locals:
  - key: fusion.elementwise_chain
    name: Elementwise chain
    global_key: fusion
    languages: [triton, cuda]
    pattern: one kernel for the chain
    op_tags: [elementwise]
transitions:
  - src: fusion
    dst: memory_access
    rationale: the fused kernel is memory-bound
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "seed.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(SeedError) as info:
        load_seed(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    assert "seed.yaml" in message  # names the file
    return message


def test_minimal_file_loads(tmp_path: Path) -> None:
    seed = load_seed(write(tmp_path, MINIMAL))
    assert [g.key for g in seed.globals] == ["fusion", "memory_access"]
    assert seed.locals[0].key == "fusion.elementwise_chain"
    assert validate_seed(seed) == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SeedError, match=r"cannot read seed file .*nope\.yaml"):
        load_seed(tmp_path / "nope.yaml")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(SeedError, match="cannot read seed file"):
        load_seed(tmp_path)


def test_sha256_of_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SeedError, match="cannot read seed file"):
        seed_sha256(tmp_path / "nope.yaml")


def test_sha256_changes_with_content(tmp_path: Path) -> None:
    first = seed_sha256(write(tmp_path, MINIMAL))
    second = seed_sha256(write(tmp_path, MINIMAL + "\n# reviewed\n"))
    assert first != second


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "seed.yaml"
    path.write_bytes(b"version: 1\nglobals: [\xff]\n")
    with pytest.raises(SeedError, match="not UTF-8"):
        load_seed(path)


def test_yaml_syntax_error_reports_line(tmp_path: Path) -> None:
    broken = MINIMAL.replace("    intent: coalesce\n", "    intent: [coalesce\n")
    message = load_error(tmp_path, broken)
    assert "YAML error at line" in message
    line = int(message.split("at line ")[1].split(",")[0])
    assert 8 <= line <= 10  # the unclosed bracket opens on line 8


def test_unquoted_colon_in_list_item_is_a_schema_error(tmp_path: Path) -> None:
    # The classic review slip: "- note: text" inside a list of strings becomes a mapping.
    text = MINIMAL.replace(
        "    op_tags: [elementwise]\n", "    op_tags: [elementwise]\n    risks:\n      - NaN: differs\n"
    )
    message = load_error(tmp_path, text)
    assert "locals[0] (key 'fusion.elementwise_chain')" in message
    assert "field 'risks.0'" in message


def test_duplicate_yaml_mapping_key(tmp_path: Path) -> None:
    text = MINIMAL.replace("    pattern: one kernel for the chain\n", "    pattern: a\n    pattern: b\n")
    message = load_error(tmp_path, text)
    assert "duplicate key 'pattern'" in message
    assert "line 15" in message  # the second `pattern:`


def test_empty_file(tmp_path: Path) -> None:
    assert "empty document" in load_error(tmp_path, "")


def test_top_level_list(tmp_path: Path) -> None:
    assert "expected a mapping" in load_error(tmp_path, "- a\n- b\n")


def test_missing_required_field_names_entry_and_field(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("    pattern: one kernel for the chain\n", ""))
    assert "locals[0] (key 'fusion.elementwise_chain')" in message
    assert "field 'pattern'" in message
    assert "required" in message.lower()


def test_unknown_field(tmp_path: Path) -> None:
    message = load_error(
        tmp_path, MINIMAL.replace("    intent: coalesce\n", "    intent: coalesce\n    colour: red\n")
    )
    assert "globals[1] (key 'memory_access')" in message
    assert "field 'colour'" in message
    assert "unknown field" in message


def test_bad_language(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("[triton, cuda]", "[triton, opencl]"))
    assert "field 'languages.1'" in message


def test_missing_version(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("version: 1\n", ""))
    assert "top-level field 'version'" in message


def test_unsupported_version(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("version: 1\n", "version: 2\n"))
    assert "version 2 is not supported" in message


def test_duplicate_global_key(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "  - key: memory_access\n    name: Memory access", "  - key: fusion\n    name: Memory access"
    )
    text = text.replace("    dst: memory_access\n", "    dst: fusion\n")
    assert "globals: duplicate key 'fusion'" in load_error(tmp_path, text)


def test_duplicate_local_key(tmp_path: Path) -> None:
    local = MINIMAL.split("locals:\n")[1].split("transitions:\n")[0]
    text = MINIMAL.replace("transitions:\n", local + "transitions:\n")
    assert "locals: duplicate key 'fusion.elementwise_chain'" in load_error(tmp_path, text)


def test_duplicate_transition(tmp_path: Path) -> None:
    transition = MINIMAL.split("transitions:\n")[1]
    message = load_error(tmp_path, MINIMAL + transition)
    assert "duplicate transition 'fusion' -> 'memory_access'" in message


def test_local_with_unknown_global(tmp_path: Path) -> None:
    text = MINIMAL.replace("    global_key: fusion\n", "    global_key: fuzion\n").replace(
        "key: fusion.elementwise_chain", "key: fuzion.elementwise_chain"
    )
    message = load_error(tmp_path, text)
    assert "global_key 'fuzion' is not a key under globals" in message


def test_local_key_not_prefixed_by_global(tmp_path: Path) -> None:
    text = MINIMAL.replace("key: fusion.elementwise_chain", "key: memory_access.elementwise_chain")
    message = load_error(tmp_path, text)
    assert "locals[0] (key 'memory_access.elementwise_chain')" in message
    assert "'fusion.<snake_name>'" in message


def test_local_key_without_snake_suffix(tmp_path: Path) -> None:
    text = MINIMAL.replace("key: fusion.elementwise_chain", "key: fusion.Elementwise-Chain")
    assert "'fusion.<snake_name>'" in load_error(tmp_path, text)


def test_transition_with_unknown_endpoint(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("    dst: memory_access\n", "    dst: tiling\n"))
    assert "transitions[0] ('fusion' -> 'tiling')" in message
    assert "dst 'tiling' is not a key under globals" in message


def test_unknown_op_tag(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("[elementwise]", "[elementwise, gemm]"))
    assert "unknown op tag(s) 'gemm'" in message
    assert "matmul" in message  # lists the allowed vocabulary


def test_empty_languages(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("[triton, cuda]", "[]"))
    assert "field 'languages' is empty" in message


def test_blank_pattern(tmp_path: Path) -> None:
    message = load_error(tmp_path, MINIMAL.replace("pattern: one kernel for the chain", 'pattern: "  "'))
    assert "field 'pattern' is empty or blank" in message


def test_several_problems_are_counted(tmp_path: Path) -> None:
    text = MINIMAL.replace("[elementwise]", "[gemm]").replace("    dst: memory_access\n", "    dst: tiling\n")
    message = load_error(tmp_path, text)
    assert "unknown op tag(s) 'gemm'" in message  # first in file order
    assert "(and 1 more problem(s))" in message


def test_safe_loader_refuses_python_tags(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: !!python/object/apply:os.system ['true']\n")
    assert "YAML error" in message
