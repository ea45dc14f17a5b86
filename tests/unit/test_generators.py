"""One registry builds every generator of `--backend`, the offline rules generator included."""

from __future__ import annotations

from pathlib import Path

import pytest

from htam_graph.errors import BackendError
from htam_graph.generators import LLMFlags, make_backend, run_generator
from htam_graph.llm.deferred import InboxGenerator
from htam_graph.llm.registry import known_backends
from htam_graph.model import PrecisionPolicy
from htam_graph.rules import RulesGenerator


def test_rules_is_a_backend_of_the_one_registry() -> None:
    assert known_backends() == ["anthropic", "batch", "command", "files", "llm", "openai", "replay", "rules"]
    generator, model, executable = make_backend("rules", None, None, precision_policy=PrecisionPolicy.TF32)
    assert isinstance(generator, RulesGenerator)
    assert model == "rules"
    assert executable is not None and executable.keywords == {"precision_policy": PrecisionPolicy.TF32}


def test_rules_runs_as_it_is_and_an_llm_backend_behind_the_reply_box(tmp_path: Path) -> None:
    rules, _, _ = make_backend("rules", None, None)
    assert run_generator(rules, tmp_path, LLMFlags()) is rules
    files, model, executable = make_backend("files", None, None)
    assert executable is None and model == "files"
    assert isinstance(run_generator(files, tmp_path, LLMFlags()), InboxGenerator)


def test_unknown_and_malformed_specs_fail_in_one_line() -> None:
    with pytest.raises(
        BackendError, match="^unknown LLM backend 'gpt-4': choose one of anthropic, .*, rules$"
    ):
        make_backend("gpt-4", None, None)
    with pytest.raises(BackendError, match=r"^the rules backend takes no argument \(got rules:x\)$"):
        make_backend("rules:x", None, None)
