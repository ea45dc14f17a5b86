"""`OptimizationLoop`: one run from start to end. It sets the run up (`RunState`), replays the steps a cut
run made, takes the steps (`choose.py` → `generate.py` → `evaluate.py`), stops on an awaited reply, a backend
failure or a generator that keeps failing, and confirms the kernel it returns (`confirm.py`)."""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable

from htam_graph import memory
from htam_graph.errors import BackendError, HtamError
from htam_graph.loop.choose import allowed_directions, digest, next_candidate
from htam_graph.loop.confirm import confirm_best, confirmation_attempt
from htam_graph.loop.context import Choice, ExecutableLocals, RunContext, RunState
from htam_graph.loop.evaluate import evaluate_and_record, replay
from htam_graph.loop.generate import Awaiting, answer_pending, device_facts
from htam_graph.model import GenerationReply, GenerationRequest, RunRecord, Task
from htam_graph.ports import EvaluationObserver, Evaluator, Generator, GraphStore, ResumableGenerator
from htam_graph.run_lessons import RunLessons, inputs_digest
from htam_graph.runtypes import PendingStep, Resume, RunConfig, RunResult, StepOutcome
from htam_graph.settings import PolicySettings
from htam_graph.state import reference_as_candidate

__all__ = ["MAX_INFRA_ERRORS_IN_A_ROW", "OptimizationLoop"]

log = logging.getLogger(__name__)

# A generator failing this many steps in a row (a command that keeps crashing, a model that never answers in
# time) ends the run: the failures add no evidence, so going on would only spend time.
MAX_INFRA_ERRORS_IN_A_ROW = 3

_Picked = tuple[Choice, GenerationRequest, GenerationReply]


class OptimizationLoop:
    """Runs the HTAM loop for tasks, with the ports passed in."""

    def __init__(
        self,
        store: GraphStore,
        evaluator: Evaluator,
        generator: Generator,
        settings: PolicySettings,
        config: RunConfig,
        *,
        executable_locals: ExecutableLocals | None = None,
        on_step: Callable[[StepOutcome], None] | None = None,
        model_name: str = "",
        on_phase: Callable[[int, str], None] | None = None,
    ) -> None:
        """`on_step` runs after every step; `on_phase(step, phase)` when a step starts "generating" (waiting
        for the generator) and "evaluating" (the candidate is checked and timed), for progress displays."""
        self.context = RunContext(store, evaluator, generator, settings, config, on_phase)
        self.executable_locals = executable_locals
        self.on_step = on_step
        self.model_name = model_name

    def run(self, task: Task, resume: Resume | None = None) -> RunResult:
        """Optimise one task for `config.steps` steps; return the best correct candidate.

        With `resume`, continue a run that was cut after its first steps: its state (direction history, best
        so far, candidates already evaluated) is rebuilt from those steps and the run goes on at the next
        one, under the same run key. Its policy draws then come from a fresh stream (seeded by the step
        count), so a resumed run is a valid run of the policy but not the one an uncut run would have drawn;
        except after a stop awaiting a reply (`resume.pending`): that step continues with its saved request
        and the policy's saved random state, so the run goes on exactly as if the reply had come at once.

        When the generator has no reply yet (`AwaitingReply`), the run stops at that step: `stopped_reason`
        is "awaiting_reply", `pending` holds the step, and the returned best is not confirmed (the run goes
        on).
        """
        cfg = self.context.config
        done = len(resume.steps) if resume else 0
        pending = resume.pending if resume else None
        if pending is not None and pending.step != done + 1:
            raise HtamError(f"the pending request is for step {pending.step}, but {done} step(s) were made")
        state = self._start(task, resume, done)
        result = state.result
        if not state.allowed:
            result.stopped_reason = "no strategy in the memory applies to this task"
            return result
        if cfg.record:
            self._record_run(state)
        self._replay(state, resume)
        # An LLM is told what the device is (GpuFacts); the facts also name the GPU architecture whose
        # evidence the policy weighs before the first evaluation has reported it.
        state.facts = device_facts(self.context, state) if state.executable is None else None
        if state.facts is not None and state.facts.device == "cuda":
            state.gpu_arch = state.gpu_arch or state.facts.gpu_arch
        for step in range(done + 1, cfg.steps + 1):
            try:
                picked = self._pick(state, step, pending)
            except Awaiting as e:
                result.pending = self._pending_step(state, step, e)
                result.stopped_reason = "awaiting_reply"
                return result  # not finished: nothing to confirm yet
            except BackendError as e:
                # A spent budget or a transport failure after retries ends the run cleanly: every step so
                # far is already recorded, and the caller reports `backend_error` (exit 1 in the CLI).
                result.stopped_reason = str(e)
                result.backend_error = e
                break
            if picked is None:
                result.stopped_reason = (
                    "every applicable strategy's candidate was already evaluated in this run"
                )
                if state.lessons.banned:
                    result.stopped_reason += ", or raised on the same inputs"
                break
            if not self._take_step(state, step, *picked):
                break
        result.stopped_reason = result.stopped_reason or f"{cfg.steps} steps done"
        self._confirm(state)
        return result

    # ------------------------------------------------------------------------------------------- set-up
    def _start(self, task: Task, resume: Resume | None, done: int) -> RunState:
        """The run's state before its first step: its key, random stream, directions and allowed ones."""
        cfg, store = self.context.config, self.context.store
        rng = random.Random(
            f"{cfg.seed}:{task.key}:{cfg.policy}" + (f":resumed-after-{done}" if done else "")
        )
        if resume is not None and resume.pending is not None:
            rng.setstate(resume.pending.rng_state)
        run_key = resume.run_key if resume else f"run-{uuid.uuid4().hex[:12]}"
        reference = reference_as_candidate(task.source)
        state = RunState(
            task=task,
            run_key=run_key,
            rng=rng,
            result=RunResult(run_key, task.key, reference, True, None, 1.0, None),
            reference=reference,
            directions={},
            executable=set(self.executable_locals(task)) if self.executable_locals else None,
            recorder=memory.Recorder(store),
            lessons=RunLessons(),
        )
        state.directions = {d.key: d for d in memory.directions(store)}
        state.allowed = allowed_directions(self.context, state, state.executable)
        return state

    def _record_run(self, state: RunState) -> None:
        cfg = self.context.config
        memory.record_run(
            self.context.store,
            RunRecord(
                key=state.run_key,
                task_key=state.task.key,
                backend=self.context.generator.name,
                policy=cfg.policy.value,
                model=self.model_name,
                started_ms=memory.now_ms(),
                precision_policy=cfg.precision_policy,
                seed=cfg.seed,
            ),
        )

    def _replay(self, state: RunState, resume: Resume | None) -> None:
        """Take in the steps made before a cut, as they were, and tell a resumable generator which of them
        it answered."""
        if resume is None:
            return
        for outcome in resume.steps:
            _learn(state.lessons, outcome, state.result.best_source)
            state.gpu_arch = replay(state.result, outcome) or state.gpu_arch
            if outcome.source is not None:
                state.evaluated.add(digest(outcome.source))
            state.history.append(outcome.global_key)
            state.prev_attempt = outcome.attempt_key
            state.result.steps.append(outcome)
        generator = self.context.generator
        if isinstance(generator, ResumableGenerator):
            answered = [o.step for o in resume.steps if not (o.generation and o.generation.infra_error)]
            generator.resumed(state.task.key, answered)

    # ------------------------------------------------------------------------------------------- steps
    def _pick(self, state: RunState, step: int, pending: PendingStep | None) -> _Picked | None:
        """The step's choice, request and reply: the pending step's, answered now, or a new candidate."""
        if pending is not None and step == pending.step:
            return answer_pending(self.context, state, pending)
        return next_candidate(self.context, state, step)

    def _pending_step(self, state: RunState, step: int, awaiting: Awaiting) -> PendingStep:
        return PendingStep(
            step=step,
            request=awaiting.request,
            direction=awaiting.choice.direction,
            rng_state=state.rng.getstate(),
            prompt=awaiting.prompt,
            backend=self.context.generator.name,
        )

    def _take_step(
        self, state: RunState, step: int, choice: Choice, request: GenerationRequest, reply: GenerationReply
    ) -> bool:
        """Evaluate, record and learn from the step's reply; False when the run must stop after it."""
        ctx, result = self.context, state.result
        if reply.source is not None:
            state.evaluated.add(digest(reply.source))
        base = result.best_source  # what the candidate was generated from (before this step's adoption)
        outcome = evaluate_and_record(ctx, state, step, choice, reply)
        _learn(state.lessons, outcome, base)
        if outcome.result is not None and outcome.result.gpu_arch:
            state.gpu_arch = outcome.result.gpu_arch
        if state.facts is not None and ctx.config.device == "cuda" and result.best_step == step:
            state.facts = device_facts(ctx, state) or state.facts  # profile the new best
        if ctx.config.record and isinstance(ctx.generator, EvaluationObserver):
            # e.g. the rules' autotune cache learns the runtime the evaluator measured for this kernel
            ctx.generator.observe(request, reply, outcome.result)
        state.history.append(choice.direction.key)
        state.prev_attempt = outcome.attempt_key
        result.steps.append(outcome)
        if self.on_step:
            self.on_step(outcome)
        state.infra_in_a_row = state.infra_in_a_row + 1 if reply.infra_error else 0
        if state.infra_in_a_row >= MAX_INFRA_ERRORS_IN_A_ROW:
            result.backend_error = BackendError(
                f"{ctx.generator.name}: {state.infra_in_a_row} steps in a row got no reply "
                f"(last: {reply.error}); the run stopped"
            )
            result.stopped_reason = str(result.backend_error)
            return False
        return True

    # ------------------------------------------------------------------------------------------- the end
    def _confirm(self, state: RunState) -> None:
        """Confirm the kernel to return on fresh seeds; record each failed confirmation as an attempt."""
        ctx = self.context
        failed = confirm_best(ctx.evaluator, ctx.config, state.task, state.result, state.reference)
        if ctx.config.record:
            for n, (outcome, check) in enumerate(failed, start=1):
                state.record(confirmation_attempt(state.run_key, state.task, ctx.config, n, outcome, check))


def _learn(lessons: RunLessons, outcome: StepOutcome, base_source: str) -> None:
    """Take a step's failure into the run's lessons (run_lessons.py): a repeated error class demotes its
    strategy for the rest of the run; a candidate that raised bans its strategy on the same base kernel."""
    if lessons.learn(
        outcome.local_key, outcome.error_kind, outcome.error_excerpt, inputs_digest(base_source)
    ):
        log.info(
            "step %d: %s failed again with an error class seen earlier in the run; "
            "demoted for the rest of it",
            outcome.step,
            outcome.local_key,
        )
