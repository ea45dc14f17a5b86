"""The bench engine without workers: selectors, results.jsonl, bench.json checks, the score, the drive loop."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from htam_graph.bench.engine import (
    BenchSpec,
    ResultsLog,
    Score,
    check_config,
    drive,
    plan_jobs,
    resolve_selectors,
)
from htam_graph.bench.executors import LocalExecutor
from htam_graph.bench.job import Job
from htam_graph.errors import ConfigError, TaskError
from htam_graph.model import Language, PrecisionPolicy, Task
from htam_graph.settings import Settings

KEYS = [
    "kernelbench/level1/19_ReLU",
    "kernelbench/level1/20_LeakyReLU",
    "kernelbench/level1/22_Tanh",
    "kernelbench/level2/12_Gemm_Multiply_LeakyReLU",
    "user/my_op",
]


class FakeTaskStore:
    """Answers the two task queries the selector resolution uses."""

    def __init__(self, keys: list[str]) -> None:
        self.tasks = {k: _task(k) for k in keys}

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        params = params or {}
        if name == "task_list":
            return [t.model_dump() for k, t in sorted(self.tasks.items())]
        if name == "task_get":
            return [self.tasks[k].model_dump() for k in params["keys"] if k in self.tasks]
        raise AssertionError(f"unexpected query {name}")


def _task(key: str) -> Task:
    parts = key.split("/")
    level = int(parts[1][5:]) if parts[1].startswith("level") else None
    return Task(key=key, suite=parts[0], level=level, name=parts[-1], source="", source_sha256="0" * 64)


def _keys(selectors: list[str]) -> list[str]:
    return [t.key for t in resolve_selectors(FakeTaskStore(KEYS), selectors)]  # type: ignore[arg-type]


def test_selectors_key_glob_level_in_order_without_repeats() -> None:
    assert _keys(["kernelbench/level1/22_Tanh"]) == ["kernelbench/level1/22_Tanh"]
    assert _keys(["kernelbench/level1/2*"]) == [
        "kernelbench/level1/20_LeakyReLU",
        "kernelbench/level1/22_Tanh",
    ]
    assert _keys(["kernelbench/level2"]) == ["kernelbench/level2/12_Gemm_Multiply_LeakyReLU"]
    assert _keys(["user/my_op", "kernelbench/level1/", "kernelbench/level1/22_Tanh"]) == [
        "user/my_op",
        "kernelbench/level1/19_ReLU",
        "kernelbench/level1/20_LeakyReLU",
        "kernelbench/level1/22_Tanh",
    ]
    # A prefix matches whole path segments only.
    with pytest.raises(TaskError, match="no task matches 'kernelbench/level'"):
        _keys(["kernelbench/level"])


def test_selector_matching_nothing_names_it() -> None:
    with pytest.raises(TaskError, match=r"no task matches 'kernelbench/level3/\*'"):
        _keys(["kernelbench/level1/22_Tanh", "kernelbench/level3/*"])


def test_selector_path_imports_the_tasks(tmp_path: Path) -> None:
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "7_Op.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
        "def get_inputs():\n    return [torch.rand(2)]\ndef get_init_inputs():\n    return []\n"
    )
    store = FakeTaskStore([])
    written: list[dict[str, Any]] = []

    def run(name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        if name == "task_upsert":
            for row in (params or {})["rows"]:
                written.append(row)
                store.tasks[row["key"]] = Task(
                    key=row["key"], **{k: v for k, v in row["props"].items() if k != "imported_ms"}
                )
            return []
        return FakeTaskStore.run(store, name, params)

    store.run = run  # type: ignore[method-assign]
    tasks = resolve_selectors(store, [str(tmp_path / "KernelBench")])  # type: ignore[arg-type]
    assert [t.key for t in tasks] == ["kernelbench/level1/7_Op"] and [r["key"] for r in written] == [
        tasks[0].key
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskError, match="no KernelBench-form task under"):
        resolve_selectors(store, [str(empty)])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- results.jsonl
def _row(task: str, seed: int = 0, **kw: Any) -> dict[str, Any]:
    return {"task": task, "policy": "htam", "seed": seed, "status": "done", **kw}


def test_results_log_appends_and_reloads(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "results.jsonl")
    log.append(_row("a"))
    log.append(_row("b", 1))
    again = ResultsLog(tmp_path / "results.jsonl")
    assert again.done == {("a", "htam", 0), ("b", "htam", 1)}
    assert [json.loads(x)["task"] for x in (tmp_path / "results.jsonl").read_text().splitlines()] == [
        "a",
        "b",
    ]


def test_results_log_cuts_a_half_written_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_row("a")) + "\n" + '{"task": "b", "pol')
    log = ResultsLog(path)
    assert log.done == {("a", "htam", 0)}
    log.append(_row("c"))
    assert [json.loads(x)["task"] for x in path.read_text().splitlines()] == ["a", "c"]


def test_results_log_refuses_a_corrupt_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text("not json\n" + json.dumps(_row("a")) + "\n")
    with pytest.raises(ConfigError, match="line 1 is not a results row"):
        ResultsLog(path)


# ---------------------------------------------------------------------------------------------- bench.json
def test_check_config_resumes_same_and_refuses_other(tmp_path: Path) -> None:
    meta = {"task_keys": ["a"], "backend": "rules", "steps": 6, "device": "cuda", "workers": 1}
    assert check_config(tmp_path, meta) is None
    (tmp_path / "bench.json").write_text(json.dumps({**meta, "started_ms": 5}))
    assert check_config(tmp_path, {**meta, "workers": 8})["started_ms"] == 5  # throughput may change
    with pytest.raises(ConfigError, match=r"another configuration \(steps: 6 here, 2 now\)"):
        check_config(tmp_path, {**meta, "steps": 2})
    with pytest.raises(ConfigError, match="task_keys"):
        check_config(tmp_path, {**meta, "task_keys": ["a", "b"]})


def test_results_without_bench_json_are_refused(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text("")
    with pytest.raises(ConfigError, match="no bench.json"):
        check_config(tmp_path, {})


# ---------------------------------------------------------------------------------------------- score
def test_score_follows_the_report_definitions() -> None:
    rows = [
        _row("kernel_fast", best_is_reference=False, best_speedup_eager_x=2.0, correct_steps=3),
        _row("kernel_slow", best_is_reference=False, best_speedup_eager_x=1.0, correct_steps=1),
        _row("reference", best_is_reference=True, best_speedup_eager_x=1.0, correct_steps=2),
        {**_row("timeout"), "status": "timeout", "best_is_reference": None, "best_speedup_eager_x": None},
    ]
    score = Score.of(rows)
    assert score.runs == 4
    assert score.correct == 0.75  # some candidate passed in 3 of 4 runs
    assert score.fast_1 == 0.25  # only a returned kernel faster than eager; never the reference
    assert math.isclose(score.geomean_eager_x, 2.0 ** (1 / 4))  # the failed run counts 1.0
    assert score.statuses == {"done": 3, "timeout": 1}
    assert Score.of([]).runs == 0


# ---------------------------------------------------------------------------------------------- jobs, drive
def _spec(**kw: Any) -> BenchSpec:
    base: dict[str, Any] = dict(
        selectors=["x"], task_keys=["a", "b"], backend="rules", model="rules", policies=["htam", "random"],
        steps=2, device="cpu", shape="smoke", seeds=[0, 1], workers=1, executor="local", frozen_memory=True,
        precision_policy=PrecisionPolicy.FP32_STRICT, language=Language.TRITON, task_timeout_s=None,
        candidate_timeout_s=60.0,
    )  # fmt: skip
    return BenchSpec(**{**base, **kw})


def test_plan_jobs_skips_done_triples_and_places_runs(tmp_path: Path) -> None:
    tasks = [_task("kernelbench/level1/a"), _task("kernelbench/level1/b")]
    done = {("kernelbench/level1/a", "random", 1)}
    jobs = plan_jobs(_spec(), tasks, Settings(), tmp_path, done)
    assert len(jobs) == 2 * 2 * 2 - 1
    assert [j.triple for j in jobs[:4]] == [
        ("kernelbench/level1/a", "htam", 0),
        ("kernelbench/level1/a", "random", 0),
        ("kernelbench/level1/a", "htam", 1),
        ("kernelbench/level1/b", "htam", 0),
    ]
    assert jobs[0].run_dir == tmp_path / "runs" / "kernelbench__level1__a" / "htam" / "seed_0"
    cfg = jobs[1].run_config()
    assert (cfg.policy, cfg.seed, cfg.steps, cfg.record, cfg.timeout_s) == ("random", 0, 2, False, 60.0)


class FakeExecutor:
    """Finishes each job on the next wait; can raise KeyboardInterrupt after some rows."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.running: list[Job] = []
        self.max_seen = 0
        self.finished = 0
        self.interrupt_after = interrupt_after
        self.shut = False

    @property
    def in_flight(self) -> int:
        return len(self.running)

    def submit(self, job: Job) -> None:
        self.running.append(job)
        self.max_seen = max(self.max_seen, len(self.running))

    def wait(self, timeout_s: float) -> list[dict[str, Any]]:
        if self.interrupt_after is not None and self.finished >= self.interrupt_after:
            raise KeyboardInterrupt
        job = self.running.pop(0)
        self.finished += 1
        return [_row(job.task.key, job.seed, policy=job.policy)]

    def shutdown(self) -> None:
        self.shut = True


def test_drive_appends_each_row_and_respects_the_limit(tmp_path: Path) -> None:
    jobs = plan_jobs(_spec(), [_task("s/level1/a"), _task("s/level1/b")], Settings(), tmp_path, set())
    results = ResultsLog(tmp_path / "results.jsonl")
    ex, seen = FakeExecutor(), []
    drive(ex, jobs, results, max_in_flight=3, on_row=seen.append)
    assert ex.max_seen == 3 and ex.shut and len(seen) == len(jobs)
    assert len(ResultsLog(tmp_path / "results.jsonl").rows) == len(jobs)


def test_drive_interrupted_keeps_finished_rows_and_shuts_down(tmp_path: Path) -> None:
    jobs = plan_jobs(_spec(), [_task("s/level1/a")], Settings(), tmp_path, set())
    results = ResultsLog(tmp_path / "results.jsonl")
    ex = FakeExecutor(interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        drive(ex, jobs, results, max_in_flight=1)
    assert ex.shut and len(ResultsLog(tmp_path / "results.jsonl").rows) == 2


def test_local_slots_spread_over_gpus() -> None:
    two = LocalExecutor(4, None, gpu_ids=["3", "5"], env={"HTAM_GPU_LOCK_DIR": "/x"})
    assert [two.slot_env(i)["CUDA_VISIBLE_DEVICES"] for i in range(4)] == ["3", "5", "3", "5"]
    assert two.slot_env(0)["HTAM_GPU_LOCK_DIR"] == "/x"
    one = LocalExecutor(2, None, gpu_ids=["0"])
    assert "CUDA_VISIBLE_DEVICES" not in one.slot_env(1)  # one GPU: the workers share it, timing locked


# ---------------------------------------------------------------------------------------------- rows
def _job(tmp_path: Path) -> Job:
    spec = _spec(policies=["htam"], seeds=[0])
    return plan_jobs(spec, [_task("kernelbench/level1/a")], Settings(), tmp_path, set())[0]


def _step(n: int, status: str, eval_: dict[str, Any] | None) -> dict[str, Any]:
    return {"step": n, "global": "g", "local": "g.l", "status": status, "error_kind": None, "eval": eval_}


def test_row_of_a_run_returning_the_reference_has_compile_over_eager(tmp_path: Path) -> None:
    from htam_graph.bench.job import result_row
    from htam_graph.loop import RunResult

    steps = [
        _step(1, "failed", {"ref_eager_us": None}),
        _step(
            2,
            "correct",
            {"ref_eager_us": 200.0, "ref_compile_us": 150.0, "gpu_name": "G", "torch_version": "2.x"},
        ),
    ]
    result = RunResult("run-1", "kernelbench/level1/a", "ref", True, None, 1.0, None)
    summary = {"best_speedup_eager_x": 1.0, "best_speedup_compile_x": None, "correct_steps": 1, "usage": {}}
    row = result_row(_job(tmp_path), result, summary, steps, 3.0)
    assert row["status"] == "done" and row["best_is_reference"] is True
    assert (row["ref_eager_us"], row["ref_compile_us"]) == (200.0, 150.0)
    assert row["best_speedup_compile_x"] == 0.75  # the reference is 0.75x of torch.compile
    assert row["gpu_name"] == "G" and [s["step"] for s in row["trajectory"]] == [1, 2]


def test_failure_row_keeps_the_steps_done_before_the_kill(tmp_path: Path) -> None:
    from htam_graph.bench.job import failure_row

    job = _job(tmp_path)
    job.run_dir.mkdir(parents=True)
    steps = [
        _step(1, "correct", {"ref_eager_us": 90.0}),
        {**_step(2, "failed", None), "error_kind": "compile_error"},
    ]
    (job.run_dir / "trajectory.json").write_text(json.dumps(steps))
    row = failure_row(job, "timeout", "killed\nafter 5 s", 5.0)
    assert row["status"] == "timeout" and row["error"] == "killed after 5 s"
    assert row["best_is_reference"] is None and row["best_speedup_eager_x"] is None
    assert (row["correct_steps"], row["compile_failures"], row["ref_eager_us"]) == (1, 1, 90.0)
    assert len(row["trajectory"]) == 2 and row["model"] == "rules"


def test_bench_json_names_torch_as_the_workers_do() -> None:
    """bench.json's torch_version is torch.__version__ (with "+cu130" / "+cpu"), the spelling every result row
    carries; the distribution metadata's "2.11.0" would make a report list "2.11.0, 2.11.0+cu130"."""
    import torch

    from htam_graph.cli.bench_meta import _environment

    assert _environment("cpu")["torch_version"] == torch.__version__
