"""CPU workers forked from a template (kernels_runtime/parent/templates.py): each evaluation still runs in a new
process of its own session with the request's environment, the template is reused, a dead template is replaced,
and `HTAM_WORKER_TEMPLATE=0` spawns every worker fresh. Timeouts, crashes and leftovers through the forked path
are covered by test_runtime_evaluator.py, whose CPU evaluations all fork."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
from htam_graph.kernels_runtime.parent.reference import reference_as_candidate
from htam_graph.kernels_runtime.parent.templates import release_templates, template_pids
from htam_graph.kernels_runtime.worker.template import _write_exit
from htam_graph.model import EvalRequest

# The reference track runs the task's own code, so the task can report on the process it runs in.
PROBE_TASK = """
import os

import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        fd = os.open(os.environ["HTAM_TEST_PROBE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, (f'{{"pid": {os.getpid()}, "ppid": {os.getppid()}, "sid": {os.getsid(0)}, '
                      f'"mark": "{os.environ.get("HTAM_TEST_MARK", "")}", "cwd": "{os.getcwd()}"}}\\n').encode())
        os.close(fd)
        return torch.tanh(x)

def get_inputs():
    return [torch.rand(4, 16)]

def get_init_inputs():
    return []
"""


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("HTAM_TEST_PROBE", str(tmp_path / "probe.jsonl"))
    monkeypatch.delenv("HTAM_WORKER_TEMPLATE", raising=False)
    release_templates()
    yield tmp_path / "probe.jsonl"
    release_templates()


def _evaluate(tmp_path: Path) -> None:
    request = EvalRequest(
        task_key="test/probe", task_source=PROBE_TASK, candidate_source=reference_as_candidate(PROBE_TASK),
        candidate_kind="reference", device="cpu", shape="smoke", trials=1, timing_runs=1, warmup_runs=1,
        timeout_s=120,
    )  # fmt: skip
    result = SubprocessEvaluator(cache_dir=tmp_path / "cache").evaluate(request)
    assert result.correct, result.error_excerpt


def _probes(path: Path) -> list[dict[str, object]]:
    """The first probe of each worker (the model runs several times in one evaluation), in order."""
    seen: dict[object, dict[str, object]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        probe = json.loads(line)
        seen.setdefault(probe["pid"], probe)
    return list(seen.values())


def test_each_evaluation_is_a_new_process_of_its_own_session_forked_from_one_template(
    _fresh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTAM_TEST_MARK", "first")
    _evaluate(tmp_path)
    [template] = template_pids()
    _evaluate(tmp_path)
    assert template_pids() == {template}, "the second evaluation must reuse the template"
    workers = {int(str(p["pid"])) for p in _probes(_fresh)}
    assert len(workers) == 2 and template not in workers and os.getpid() not in workers
    for probe in _probes(_fresh):
        assert probe["ppid"] == template  # forked by the template, not by this process
        assert probe["sid"] == probe["pid"]  # its own session: the evaluator kills its whole group
        assert probe["mark"] == "first"
        assert Path(str(probe["cwd"])).name.startswith("htam-worker-")  # the run's own folder


def test_a_changed_environment_gets_a_template_of_its_own(
    _fresh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTAM_TEST_MARK", "first")
    _evaluate(tmp_path)
    monkeypatch.setenv("HTAM_TEST_MARK", "second")
    _evaluate(tmp_path)
    assert [p["mark"] for p in _probes(_fresh)] == ["first", "second"]
    assert len(template_pids()) == 2


def test_a_dead_template_is_replaced(_fresh: Path, tmp_path: Path) -> None:
    _evaluate(tmp_path)
    [template] = template_pids()
    os.kill(template, signal.SIGKILL)
    _evaluate(tmp_path)
    assert len(template_pids()) == 1 and template not in template_pids()
    assert _probes(_fresh)[-1]["ppid"] != template


def test_templates_switched_off_spawn_every_worker_fresh(
    _fresh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTAM_WORKER_TEMPLATE", "0")
    _evaluate(tmp_path)
    assert template_pids() == set()
    assert _probes(_fresh)[0]["ppid"] == os.getpid()


def test_the_template_outlives_a_run_folder_removed_before_its_worker_ended(tmp_path: Path) -> None:
    """The evaluator stops waiting for a killed worker after 10 s and removes its folder; the template reaps the
    worker later and must go on serving (its report has nowhere to go)."""
    _write_exit(str(tmp_path / "gone" / "exit_code"), -9)
    assert not (tmp_path / "gone").exists()
