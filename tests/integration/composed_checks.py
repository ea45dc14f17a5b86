"""What the composed-kernel interpreter tests share: a task from a source, the candidate the real rules
generator writes for the composed strategy, and the check of (task, candidate) pairs against the reference in a
process where TRITON_INTERPRET=1 was set from the start (interp_child.py).

Loaded by path (`load_sibling("composed_checks")`, see sibling_module.py); the check runs this file's
`check_against_reference` in that process.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from htam_graph.model import GenerationRequest, GlobalDirection, Language, LocalStrategy, Task
from htam_graph.rules import RulesGenerator, parse_header
from htam_graph.rules.compose import KEY

INTERP_CHILD = Path(__file__).with_name("interp_child.py")
import_candidate = runpy.run_path(str(Path(__file__).with_name("candidate_import.py")))["import_candidate"]

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


def make_task(name: str, source: str) -> Task:
    return Task(key=f"composed/{name}", suite="kernelbench", level=2, name=f"{name}.py", source=source,
                source_sha256="0" * 64)  # fmt: skip


def generate(task: Task) -> str:
    """The composed candidate written by the real rules generator, after `applies` said the strategy fits."""
    verdict = RulesGenerator().applies(KEY, task)
    assert verdict, verdict.reason
    request = GenerationRequest(
        task=task,
        step=0,
        direction=GlobalDirection(key="fusion", name="fusion", intent=""),
        strategy=LocalStrategy(
            key=KEY, name=KEY, global_key="fusion", languages=[Language.TRITON], pattern=""
        ),
        base_source="",
        language=Language.TRITON,
        state_summary="",
        device="cpu",
    )
    reply = RulesGenerator().generate(request)
    assert reply.source is not None, reply.error
    header = parse_header(reply.source)
    assert header is not None and header.recipe == KEY
    return reply.source


def check_against_reference(sources: list[str], candidates: list[str], directory: Path) -> list[float]:
    """Run in the child: each (task, candidate) pair, parameters randomised and shared; the max errors."""
    import torch

    errors = []
    for i, (source, candidate) in enumerate(zip(sources, candidates, strict=True)):
        task = import_candidate(source, directory)
        new = import_candidate(candidate, directory)
        torch.manual_seed(i)
        reference = task.Model(*task.get_init_inputs())
        with torch.no_grad():
            for param in reference.parameters():
                param.copy_(torch.randn_like(param))
        model = new.ModelNew(*task.get_init_inputs())
        model.load_state_dict(reference.state_dict())
        inputs = task.get_inputs()
        with torch.no_grad():
            want, got = reference(*inputs), model(*inputs)
        assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), f"max error {(got - want).abs().max().item()}"
        errors.append((got - want).abs().max().item())
    return errors


def run_checks(sources: list[str], candidates: list[str], directory: Path) -> list[float]:
    """`check_against_reference` in a process that had TRITON_INTERPRET=1 from the start."""
    run_isolated: Any = runpy.run_path(str(INTERP_CHILD))["run_isolated"]
    kwargs = {"sources": sources, "candidates": candidates, "directory": str(directory)}
    errors: list[float] = run_isolated(__file__, "check_against_reference", kwargs)
    return errors
